"""Asking the person in a dialog, for real, with no sandbox: the asker (lnk-sandbox-ask)
started here, its question shown by zenity on Xvfb and clicked or typed into with xdotool
(a screenshot kept in the test's folder): a click, a deliberate yes, stray keys, Escape, a
closed window, the longest questions on a small screen.

Run once (tests/conftest.py NOT_USER_DEPENDENT): a dialog is drawn and clicked alike for
root and an ordinary user; the queue and its files' owners and modes, and the dialogs a
real sandbox's call raises, are test_ask's, which runs as both.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lnk_ask.text import MAX_ALLOWS_CHARS, MAX_TITLE_CHARS
from lnk_ask.ways import DIALOG_HEIGHT, DIALOG_WIDTH
from tests.conftest import wait_until
from tests.test_ask import (
    TOOL_TITLE,
    _xvfb,
    click,
    close_window,
    finish,
    keys,
    screenshot,
    start_dialog_ask,
    start_page_ask,
    tick_and_allow,
    window,
    xdotool,
)


def within(where: dict[str, int], size: tuple[int, int]) -> bool:
    return (where["X"] >= 0 and where["Y"] >= 0 and where["X"] + where["WIDTH"] <= size[0]
            and where["Y"] + where["HEIGHT"] <= size[1])


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    """A virtual screen of this module's own, 1024x768 (the issue's laptop)."""
    yield from _xvfb("1024x768")


@pytest.fixture(scope="module")
def small_display() -> Iterator[str]:
    """A screen smaller than the dialog's default size: 640x480."""
    yield from _xvfb("640x480")


@pytest.mark.parametrize(("button", "expected"), [("Allow", "yes"), ("Deny", "no")])
def test_dialog_clicked(display: str, sandbox_env: dict[str, str], tmp_path: Path,
                        button: str, expected: str) -> None:
    title = f"{TOOL_TITLE} {secrets.token_hex(4)}"
    asker = start_dialog_ask(sandbox_env, display, title, 60)
    try:
        window(display, title)
        screenshot(display, tmp_path / f"dialog-{button}.png")
        if button == "Allow":
            tick_and_allow(display, title)
        else:
            click(display, title, "Deny")
        status, found, _ = finish(asker)
        assert (found["answer"], found["how"], status) == (
            expected, "dialog", 0 if expected == "yes" else 1)
    finally:
        asker.kill()
        asker.communicate()


@pytest.mark.parametrize(("screen", "size"), [("display", (1024, 768)),
                                              ("small_display", (640, 480))])
def test_dialog_of_the_longest_tool_call_question_fits_the_screen(
    screen: str, size: tuple[int, int], sandbox_env: dict[str, str], tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The longest question of a tool call (escapes and long words, cut at
    MAX_QUESTION_CHARS) under the longest title, and the longest what-a-yes-allows, of the
    widest letter (its box's label cut to its lines; 60 Ws a line once made the window
    832 pixels wide): the window within the screen and its bound, the box reached and
    Allow chosen."""
    shown_on = request.getfixturevalue(screen)
    title = (f"{secrets.token_hex(4)} demo: run " + "d" * 80)[:MAX_TITLE_CHARS]
    question = "call create_issue " + "\u202e\u0430bc " * 60 + "Z" * 3000
    allows = ("sandbox dlg, server demo, tool delete_repo" + "W" * 300)[:MAX_ALLOWS_CHARS]
    asker = start_dialog_ask(sandbox_env, shown_on, title, 60, question, allows)
    try:
        where = window(shown_on, title)
        screenshot(shown_on, tmp_path / f"dialog-longest-{size[0]}.png")
        assert within(where, size), where
        assert where["WIDTH"] <= min(DIALOG_WIDTH, size[0] * 0.8) + 1, where
        assert where["HEIGHT"] <= min(DIALOG_HEIGHT, size[1] * 0.8) + 1, where
        tick_and_allow(shown_on, title)
        status, found, _ = finish(asker)
        assert (status, found["answer"], found["how"]) == (0, "yes", "dialog")
    finally:
        asker.kill()
        asker.communicate()


def test_dialog_left_alone_is_no_after_the_timeout(display: str, sandbox_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    title = f"{TOOL_TITLE} {secrets.token_hex(4)}"
    started = time.monotonic()
    asker = start_dialog_ask(sandbox_env, display, title, 3)
    window(display, title)
    screenshot(display, tmp_path / "dialog-waiting.png")
    status, found, _ = finish(asker)
    assert time.monotonic() - started >= 3
    assert (status, found["answer"], found["how"]) == (1, "no", "timeout")
    # The dialog is gone with the question.
    wait_until(lambda: not xdotool(display, "search", "--name", f"^{title}$").split(),
             "the dialog to close")


@pytest.mark.parametrize(("screen", "size"), [("display", (1024, 768)),
                                              ("small_display", (640, 480))])
def test_page_dialog_of_the_longest_url_fits_the_screen_and_allow_is_reached(
    screen: str, size: tuple[int, int], sandbox_env: dict[str, str], tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The issue's attack, at the limit: a 16 KiB URL (the verb's longest) made a window
    taller than the screen, its end and its buttons below it. The window is bounded,
    read against the screen's size (at most 80% of a 640x480 one), the URL scrolls in
    it, the host on its first line, and Allow is there to be chosen."""
    shown_on = request.getfixturevalue(screen)
    title = f"pages: open docs.example.org? {secrets.token_hex(4)}"
    asker = start_page_ask(sandbox_env, shown_on, title, 60)
    try:
        where = window(shown_on, title)
        screenshot(shown_on, tmp_path / f"page-dialog-{size[0]}.png")
        assert within(where, size), where
        assert where["WIDTH"] <= min(DIALOG_WIDTH, size[0] * 0.8) + 1, where
        assert where["HEIGHT"] <= min(DIALOG_HEIGHT, size[1] * 0.8) + 1, where
        # The URL's end is read by scrolling to it (the wheel, over the text: reading
        # changes nothing, so Allow is still yes after).
        xdotool(shown_on, "mousemove", str(where["X"] + where["WIDTH"] // 2),
                str(where["Y"] + where["HEIGHT"] // 3), "click", "--repeat", "400",
                "--delay", "2", "5")
        time.sleep(0.5)  # drawn before it is photographed
        screenshot(shown_on, tmp_path / f"page-dialog-{size[0]}-end.png")
        tick_and_allow(shown_on, title)
        status, found, _ = finish(asker)
        assert (status, found["answer"], found["how"]) == (0, "yes", "dialog")
    finally:
        asker.kill()
        asker.communicate()


def test_page_dialog_of_the_longest_question_and_title_fits(
    display: str, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    """The longest question a page's dialog shows (MAX_WHOLE_QUESTION_CHARS, escapes
    and the cut's note included) under the longest title."""
    title = (f"{secrets.token_hex(4)} pages: open " + "a" * 80)[:MAX_TITLE_CHARS]
    question = "\u202e\u0430" * 3000 + "y" * 20000
    asker = start_page_ask(sandbox_env, display, title, 60, question)
    try:
        where = window(display, title)
        screenshot(display, tmp_path / "page-dialog-longest.png")
        assert within(where, (1024, 768)), where
        tick_and_allow(display, title)
        status, found, _ = finish(asker)
        assert (status, found["answer"]) == (0, "yes")
    finally:
        asker.kill()
        asker.communicate()


@pytest.mark.parametrize("stray", [["Return"], ["space"], ["Tab", "space"],
                                   ["Tab", "space", "Return"], ["Tab", "Tab", "space"],
                                   ["ISO_Left_Tab", "space"]])
def test_attack_page_dialog_stray_keys_are_never_yes(
    display: str, sandbox_env: dict[str, str], stray: list[str]
) -> None:
    """A key typed into the page's dialog (by a person typing elsewhere as it appears):
    none reaches Allow (it is greyed until the box is ticked, and the keys land in the
    text), and the text then differs from what was shown, so even a deliberate Allow
    after is no. (Before: Deny had the focus, and Tab then Space was Allow.)"""
    title = f"pages: open docs.example.org? {secrets.token_hex(4)}"
    asker = start_page_ask(sandbox_env, display, title, 60)
    try:
        where = window(display, title)
        keys(display, where, *stray)
        try:
            asker.wait(1)  # the keys alone: an answer (it must be no), or none yet
        except subprocess.TimeoutExpired:
            tick_and_allow(display, title)
        status, found, _ = finish(asker)
        assert (status, found["answer"], found["how"]) == (1, "no", "dialog")
    finally:
        asker.kill()
        asker.communicate()


@pytest.mark.parametrize("how", ["Escape", "close"])
def test_page_dialog_escape_and_closing_are_no(display: str, sandbox_env: dict[str, str],
                                               how: str) -> None:
    title = f"pages: open docs.example.org? {secrets.token_hex(4)}"
    asker = start_page_ask(sandbox_env, display, title, 60)
    try:
        where = window(display, title)
        if how == "close":
            close_window(display, where["WINDOW"])
        else:
            keys(display, where, "Escape")
        status, found, _ = finish(asker)
        assert (status, found["answer"], found["how"]) == (1, "no", "dialog")
    finally:
        asker.kill()
        asker.communicate()


def test_page_dialog_by_keys_alone_takes_three_deliberate_ones(
    display: str, sandbox_env: dict[str, str]
) -> None:
    """The keyboard's way to Allow: Ctrl+Tab (out of the text), Space (the box), Enter
    (Allow, the default once it is not greyed). Said as the residue in the docs."""
    title = f"pages: open docs.example.org? {secrets.token_hex(4)}"
    asker = start_page_ask(sandbox_env, display, title, 60)
    try:
        keys(display, window(display, title), "ctrl+Tab", "space", "Return")
        status, found, _ = finish(asker)
        assert (status, found["answer"], found["how"]) == (0, "yes", "dialog")
    finally:
        asker.kill()
        asker.communicate()
