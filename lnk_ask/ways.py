"""The ways of asking, as data (sans IO): which dialog program, its argv, what its exit
means; the terminal's prompt and how a typed line is judged.

A dialog program is found only in the system's own folders (DIALOG_FOLDERS), owned by
root (or by us) and writable by no one else, never on PATH: PATH is the caller's, and a
harness's PATH may hold a folder a sandbox writes (`~/.local/bin`, a project's
`node_modules/.bin`), where a planted `zenity` would run outside the sandbox and say
yes. It runs with DIALOG_ENVIRONMENT only (the display, the session bus, the locale):
GTK_MODULES, GTK_PATH, LD_PRELOAD and the like in the caller's environment would load
code into the one program whose answer is trusted.

Every question on zenity is one dialog (zenity_argv), whatever asks (a tool call, `guest
add`, a page, `lnk-sandbox-ask` by hand): not a label that grows with its text (an 8
KiB URL made a 1,687-pixel window on a 768-pixel screen, its end and its buttons below
the screen) nor `--question`, whose Deny has the focus and Allow is next (Tab then
Space: one stray key pair was a yes for a tool call), but `zenity --text-info`: a window
of a bounded size, read against the screen's, in which the text scrolls, the title alone
on its first line. Its Allow stays greyed until the person ticks the box under the text,
whose label says what a yes allows (the caller's `allows`, Link's words: the sandbox and
the tool and its server, or the page's host), so that is read where the choice is made;
the text is editable, so keys typed into the window (Enter, Space, Tab: a stray key, a
key meant for another window) land in the text, and an Allow with the text changed is no
(dialog_verdict: what was read is not what is allowed). notify-send and osascript keep
their own kinds (see their functions for their defaults).
"""

from __future__ import annotations

import hmac
import os
import stat

from lnk_ask.text import spaces_shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ALLOW_LABEL",
    "CHECKBOX_LINES",
    "CODE_DIGITS",
    "CUT_MARK",
    "DENY_LABEL",
    "DIALOG_ENVIRONMENT",
    "DIALOG_FOLDERS",
    "DIALOG_FONT",
    "DIALOG_HEIGHT",
    "DIALOG_WIDTH",
    "FALLBACK_TERMINAL_SIZE",
    "LINK_MARK",
    "MAX_TYPED_BYTES",
    "MIN_TERMINAL_COLUMNS",
    "MIN_TERMINAL_ROWS",
    "OSASCRIPT_FIRST_WORD",
    "PROGRAM_GUTTER",
    "ZENITY_NO_DISPLAY",
    "Dialog",
    "checkbox_label",
    "code_matches",
    "dialog_environment",
    "dialog_lines",
    "dialog_size",
    "dialog_text",
    "dialog_verdict",
    "find_program",
    "notify_argv",
    "osascript_argv",
    "pick_dialog",
    "screen_size",
    "terminal_prompt",
    "terminal_too_small",
    "zenity_argv",
]

# Where a dialog program is looked for: the system's folders only (see above).
DIALOG_FOLDERS = ("/usr/bin", "/bin", "/usr/local/bin")
# What a dialog program is given of the caller's environment.
DIALOG_ENVIRONMENT = ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR",
                      "DBUS_SESSION_BUS_ADDRESS", "HOME", "LANG", "LANGUAGE", "LC_ALL",
                      "LC_MESSAGES", "LC_CTYPE")
# The terminal's code: six digits. Nothing in a sandbox sees it (it is written to the
# terminal, which a program can write to and read keystrokes from, but not read the
# screen of), so it proves the line typed was typed by someone who read this question;
# a code typed from a faked question matches it by chance once in a million.
CODE_DIGITS = 6
# A line typed at the prompt longer than this is no (a code is six digits).
MAX_TYPED_BYTES = 64
ALLOW_LABEL = "Allow"
DENY_LABEL = "Deny"
# The dialog, in pixels: what fits a 800x600 screen with a panel or two (the smallest a
# desktop has), and at most DIALOG_SCREEN_SHARE of the screen when it is smaller still
# (xwininfo's root window: the union of the monitors, so never taken to make the window
# larger than this). Its text scrolls inside; the window never grows with it (checked on
# Xvfb at 1024x768 and 640x480 with the longest question of each kind).
DIALOG_WIDTH = 680
DIALOG_HEIGHT = 460
DIALOG_SCREEN_SHARE = 0.8
# A fixed-width font, so dialog_text's lines have a known width (DejaVu Sans Mono at 10
# points on a 96-dpi screen: 8 pixels a character); the margin is the text box's frame,
# its scroll bar and the window's border.
DIALOG_FONT = "Monospace 10"
DIALOG_CHAR_PIXELS = 8
DIALOG_MARGIN_PIXELS = 72
# The box's label (what a yes allows, a program's words in part: a tool's name): GTK
# never cuts a label's line, so its longest sets the window's least width (60 Ws of the
# default font made a window of 832 pixels on a 640-pixel screen). So its lines are cut
# for the widest character (W, some 13 pixels in a 10-point sans at 96 dpi), in the
# window's width less the box and the border; and they take from the text's height (at
# 640x480, 6 lines leave the text some 8 of its lines). Past that it is cut, saying so:
# the whole is in the text, above.
CHECKBOX_CHAR_PIXELS = 14
CHECKBOX_MARGIN_PIXELS = 72
CHECKBOX_LINES = 6
CHECKBOX_PREFIX = "I have read it, and allow: "
# The terminal's layout (terminal_prompt). Every line of Link's own begins with the mark,
# flush left; every line of the question's text (a program's words) begins with the
# gutter, which no line of Link's does.
LINK_MARK = "[lnk]"
PROGRAM_GUTTER = "  | "
# Where one of Link's lines is cut to fit the terminal's width.
CUT_MARK = " [cut]"
# A terminal smaller than this cannot show a header, a line of the question, what was cut
# (its line, with a question's id, is 65 characters at most) and the code's line with what
# a yes allows: the question is not asked there (it says so).
MIN_TERMINAL_COLUMNS = 70
MIN_TERMINAL_ROWS = 6
# A terminal that does not say its size (TIOCGWINSZ gives 0): the common one.
FALLBACK_TERMINAL_SIZE = (80, 24)


# What GTK says on stderr, before any window, when it cannot reach the display it was
# given (an X server gone or not yet up); zenity then exits 1, Deny's status.
ZENITY_NO_DISPLAY = "cannot open display"


class Dialog:
    """A dialog to start: `kind` (zenity, notify-send, osascript), its argv, and what
    it is given on its standard input (zenity's text)."""

    __slots__ = ("argv", "kind", "stdin")

    def __init__(self, kind: str, argv: list[str], stdin: str = "") -> None:
        self.kind = kind
        self.argv = argv
        self.stdin = stdin

    def verdict(self, status: int, out: str, err: str) -> str | None:
        """What its end means (dialog_verdict), from its status and its output: zenity
        prints its text on Allow (stdout only: GTK warns on stderr). A zenity that could
        not open its display exits 1, as Deny does: that is no answer (the question stays
        open on the terminal and in the queue), not the person's no."""
        if self.kind == "zenity":
            if status == 1 and ZENITY_NO_DISPLAY in err:
                return None
            return dialog_verdict(self.kind, status, out, shown=self.stdin)
        return dialog_verdict(self.kind, status, out + err)


def find_program(name: str, folders: tuple[str, ...] = DIALOG_FOLDERS) -> str | None:
    """The first `name` in `folders` that is a regular executable file owned by root or
    us and writable by no one else, in a folder likewise; None when there is none."""
    trusted = {0, os.geteuid()}
    for folder in folders:
        path = os.path.join(folder, name)
        try:
            where = os.stat(folder)
            info = os.stat(path)
        except OSError:
            continue
        if (stat.S_ISREG(info.st_mode) and info.st_mode & 0o111
                and info.st_uid in trusted and not info.st_mode & 0o022
                and where.st_uid in trusted and not where.st_mode & 0o022):
            return path
    return None


def dialog_environment(env: Mapping[str, str]) -> dict[str, str]:
    kept = {name: env[name] for name in DIALOG_ENVIRONMENT if env.get(name)}
    kept["PATH"] = "/usr/bin:/bin"
    # GTK's scroll bars always drawn (not only under the pointer): a page's text that
    # goes on below the window shows that it does.
    kept["GTK_OVERLAY_SCROLLING"] = "0"
    return kept


def dialog_lines(text: str, width: int) -> str:
    """`text` (printable ASCII; its own line breaks are ours) cut into lines of at most
    `width`, between words where it can, inside a word where it must. Every character
    is kept (no space dropped or merged), so the lines still read as the text."""
    import textwrap

    lines: list[str] = []
    for line in text.split("\n"):
        lines += textwrap.wrap(line, width, drop_whitespace=False, replace_whitespace=False,
                               break_on_hyphens=False, break_long_words=True) or [""]
    return "\n".join(lines)


def dialog_size(screen: tuple[int, int] | None) -> tuple[int, int]:
    """The dialog's width and height: DIALOG_WIDTH x DIALOG_HEIGHT, or
    DIALOG_SCREEN_SHARE of a screen too small for that."""
    width, height = DIALOG_WIDTH, DIALOG_HEIGHT
    if screen is not None:
        width = min(width, int(screen[0] * DIALOG_SCREEN_SHARE))
        height = min(height, int(screen[1] * DIALOG_SCREEN_SHARE))
    return width, height


def dialog_text(title: str, question: str, width: int) -> str:
    """The dialog's text: the title on the first line, alone, then the question cut
    into lines that fit a dialog `width` pixels wide."""
    chars = max(20, (width - DIALOG_MARGIN_PIXELS) // DIALOG_CHAR_PIXELS)
    lines = dialog_lines(question, chars)
    return (f"{dialog_lines(title, chars)}\n({lines.count(chr(10)) + 1} lines below: "
            f"read them to the end)\n\n{lines}\n")


def checkbox_label(allows: str, width: int) -> str:
    """The box's label in a dialog `width` pixels wide: CHECKBOX_PREFIX and what a yes
    allows (printable ASCII), in at most CHECKBOX_LINES lines that fit it whatever their
    characters, the last ending with CUT_MARK when cut."""
    chars = max(20, (width - CHECKBOX_MARGIN_PIXELS) // CHECKBOX_CHAR_PIXELS)
    lines = dialog_lines(CHECKBOX_PREFIX + allows, chars).split("\n")
    if len(lines) > CHECKBOX_LINES:
        lines = lines[:CHECKBOX_LINES]
        lines[-1] = _fitted(lines[-1] + CUT_MARK, chars)
    return "\n".join(lines)


def zenity_argv(zenity: str, title: str, allows: str, seconds: int,
                size: tuple[int, int]) -> list[str]:
    """`zenity --text-info` (its text on standard input: dialog_text): a window of
    `size`, the text scrolling in it; Allow greyed until the box saying what a yes
    allows (checkbox_label) is ticked; --editable, so a key typed into the window
    changes the text (and then Allow is no: dialog_verdict) rather than reaching a
    button. The box's label is read as it is (GTK reads no markup nor mnemonic in it: checked on
    a screenshot); the title is the window's title too."""
    return [zenity, "--text-info", f"--title={title}", "--editable",
            f"--checkbox={checkbox_label(allows, size[0])}", f"--font={DIALOG_FONT}",
            f"--width={size[0]}", f"--height={size[1]}",
            f"--ok-label={ALLOW_LABEL}", f"--cancel-label={DENY_LABEL}",
            f"--timeout={max(1, seconds)}"]


def screen_size(env: Mapping[str, str]) -> tuple[int, int] | None:
    """The X screen's size (`xwininfo -root`, found as a dialog program is), or None:
    no X display, no xwininfo, or an answer not understood (the default size then)."""
    import re
    import subprocess

    xwininfo = find_program("xwininfo")
    if xwininfo is None or not env.get("DISPLAY"):
        return None
    try:
        shown = subprocess.run([xwininfo, "-root"], capture_output=True, text=True,
                               timeout=5, check=False, env=dialog_environment(env),
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    width = re.search(r"^\s*Width: (\d{1,6})$", shown.stdout, re.MULTILINE)
    height = re.search(r"^\s*Height: (\d{1,6})$", shown.stdout, re.MULTILINE)
    if shown.returncode != 0 or width is None or height is None:
        return None
    return int(width.group(1)), int(height.group(1))


def _markup_escaped(text: str) -> str:
    # A notification's body may be read as markup by the server (the spec's subset):
    # the text is printable ASCII already; these three are all markup reads.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def notify_argv(notify: str, title: str, question: str, seconds: int) -> list[str]:
    """notify-send with actions (libnotify 0.7.10+): --wait until acted on or closed;
    the chosen action's key is printed. No action is a default: a notification takes no
    keyboard focus, so keys typed elsewhere do not answer it (the server's own keys
    aside: not run in the tests, no notification server runs there)."""
    return [notify, "--app-name=lnk-sandbox", "--urgency=critical", "--wait",
            f"--expire-time={max(1, seconds) * 1000}",
            f"--action=yes={ALLOW_LABEL}", f"--action=no={DENY_LABEL}",
            "--", title, _markup_escaped(question)]


# osascript hands the words after its script to the script's run handler (`on run
# argv`): the question and the title go there as data, never into the script's text.
# The first of them is this fixed word: osascript reads options only up to its first
# other word, so a question that starts with '-' is data too.
OSASCRIPT_FIRST_WORD = "lnk-sandbox"


def osascript_argv(title: str, question: str, seconds: int) -> list[str]:
    """macOS: `display dialog` with Deny as the default and cancel button (Enter and
    Escape are no; Tab and Space reach Allow only with the system's keyboard navigation
    on); the question and the title passed as data (`item 2` and `item 3 of argv`), the
    script only ours. Generated and golden-tested here; not run on a Mac yet
    (docs/components/README.md, "Stated gaps")."""
    script = ("on run argv",
              "display dialog (item 2 of argv) with title (item 3 of argv) "
              f'buttons {{"{DENY_LABEL}", "{ALLOW_LABEL}"}} default button "{DENY_LABEL}" '
              f'cancel button "{DENY_LABEL}" with icon caution '
              f"giving up after {max(1, int(seconds))}",
              "end run")
    argv = ["/usr/bin/osascript"]
    for line in script:
        argv += ["-e", line]
    return [*argv, OSASCRIPT_FIRST_WORD, question, title]


def pick_dialog(env: Mapping[str, str], platform: str, title: str, question: str,
                seconds: int, *, allows: str, screen: tuple[int, int] | None = None,
                notify_has_actions: bool | None = None) -> Dialog | None:
    """The dialog to show, or None where there is no screen or no program for it.
    zenity's (zenity_argv) is sized against `screen` (None: the default size), its box
    labelled with `allows`; the others show `question`, which says it too.
    `notify_has_actions`: whether notify-send takes --action (None: ask it)."""
    if platform == "darwin":
        if os.path.isfile("/usr/bin/osascript"):
            return Dialog("osascript", osascript_argv(title, question, seconds))
        return None
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return None
    zenity = find_program("zenity")
    if zenity:
        size = dialog_size(screen)
        return Dialog("zenity", zenity_argv(zenity, title, allows, seconds, size),
                      dialog_text(title, question, size[0]))
    notify = find_program("notify-send")
    if notify:
        if notify_has_actions is None:
            notify_has_actions = _notify_takes_actions(notify, env)
        if notify_has_actions:
            return Dialog("notify-send", notify_argv(notify, title, question, seconds))
    return None


def _notify_takes_actions(notify: str, env: Mapping[str, str]) -> bool:
    import subprocess

    try:
        shown = subprocess.run([notify, "--help"], capture_output=True, text=True,
                               timeout=5, check=False, env=dialog_environment(env),
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--action" in shown.stdout


def dialog_verdict(kind: str, status: int, output: str, *, shown: str = "") -> str | None:
    """What a dialog's end means: "yes", "no", or None (no answer: its own timeout, a
    notification closed or expired, an error; the question stays open elsewhere).
    `shown`: zenity's text, which its output on Allow must be, unchanged."""
    if kind == "zenity":
        # 0 Allow (ticked, then clicked): yes only with the text as shown; a text
        # changed in the window (a stray key landed in it) is no. 1 Deny, Escape, the
        # window closed (the person said no); 5 its timeout; anything else (-1/255: no
        # display) an error.
        if status == 0:
            return "yes" if shown and output == shown else "no"
        return {1: "no"}.get(status)
    if kind == "notify-send":
        chosen = output.strip()
        return chosen if status == 0 and chosen in ("yes", "no") else None
    if kind == "osascript":
        if status == 0 and "gave up:true" not in output:
            return "yes" if f"button returned:{ALLOW_LABEL}" in output else "no"
        # Cancel (Deny, Escape) is error -128 on stderr and status 1.
        return "no" if status == 1 and "(-128)" in output else None
    return None


def _fitted(line: str, width: int) -> str:
    """One of Link's lines within `width` columns; a cut one ends with CUT_MARK."""
    return line if len(line) <= width else line[:max(0, width - len(CUT_MARK))] + CUT_MARK


def terminal_prompt(title: str, question: str, allows: str, wire: str, ident: str,
                    code: str, seconds: int, columns: int, rows: int) -> str | None:
    """What the terminal shows, laid out for a terminal of `columns` x `rows` (every text
    printable ASCII already), or None when it is smaller than MIN_TERMINAL_COLUMNS x
    MIN_TERMINAL_ROWS. Every line fits the width (none wraps) and all of them the height
    (none scrolls off): a header, the question's text (each line after PROGRAM_GUTTER,
    cut to the rows left, with what was cut said and where it is whole), then the code's
    line, which says what the code allows. Link's lines begin with LINK_MARK, flush
    left; the question's never do, and its runs of spaces are written out
    (text.spaces_shown), so nothing in it can pass for a line of Link's."""
    if columns < MIN_TERMINAL_COLUMNS or rows < MIN_TERMINAL_ROWS:
        return None
    width = columns - 1  # a line of exactly the width leaves some terminals a line on
    header = _fitted(f"{LINK_MARK} asks ({ident}, wire {wire}): "
                     f"{spaces_shown(title)}", width)
    footer = [_fitted(f"{LINK_MARK} Enter after the code; anything else is no; no answer "
                      f"in {seconds} s is no.", width),
              _fitted(f"{LINK_MARK} Type {code} to allow: {spaces_shown(allows)}", width),
              f"{LINK_MARK} > "]
    text = spaces_shown(question)
    lines = dialog_lines(text, width - len(PROGRAM_GUTTER)).split("\n")
    room = rows - 1 - len(footer)
    if len(lines) > room:
        room -= 1  # the line that says what was cut
        kept = lines[:room]
        hidden = len(text) - sum(len(line) for line in kept)
        footer.insert(0, _fitted(f"{LINK_MARK} {hidden} more characters: lnk-sandbox asks "
                                 f"--show {ident}", width))
        lines = kept
    shown = [header, *(PROGRAM_GUTTER + line for line in lines), *footer]
    return "\r\n" + "\r\n".join(shown)


def terminal_too_small(ident: str, columns: int) -> str:
    """What a terminal too small to show a question shows (three short lines): it is not
    asked there."""
    lines = (f"{LINK_MARK} question {ident} waits;", f"{LINK_MARK} this terminal is too small",
             f"{LINK_MARK} to show it: lnk-sandbox asks")
    return "".join(f"\r\n{_fitted(line, max(1, columns - 1))}" for line in lines) + "\r\n"


def code_matches(typed: bytes, code: str) -> bool:
    """A typed line is yes only when it is the code (spaces around or inside ignored)."""
    text = typed.replace(b" ", b"").strip()
    return hmac.compare_digest(text, code.encode())
