"""Opening a page in the person's browser, and a login's callback: real sandboxes.

The program inside runs Python's `webbrowser`, `xdg-open`, `sensible-browser` or
`www-browser`; each is the sandbox's browser (lnk_wrap/browser/lnk-open), which asks the
proxy at `$LNK_SANDBOX_URL/open`. The person is asked through the queue (answered here
with `lnk-sandbox answer`); the person's opener is a recording `xdg-open` put first on
the PATH `lnk-sandbox run` is given (the harness's), which, for a login, plays the browser
and follows the redirect. What holds: yes opens exactly the form shown; no opens nothing
and the program's open fails; other schemes and userinfo never reach the person or the
opener; what is shown is printable ASCII, whole (an 8 KiB URL included); a login's
callback reaches the program once and the port is closed after; nothing listens while the
person is asked (a request sent then never reaches the program, a no holds no port); a
port already taken is asked about as a free one and refused after yes; a redirect
elsewhere is not listened for; the log keeps the host only; opens count as calls;
[commands] does not stop the browser.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    WriteSpec,
    answer_next,
    end_run,
    toml_list,
    wire_log_of,
)

PYTHON = "/usr/bin/python3"  # inside: the system's, readable in every sandbox

# The person's opener: records each URL it is given, one a line; with FOLLOW set, plays
# the browser for a login (follows the redirect_uri with a code and the page's state;
# FOLLOW=later: after the opener has returned, as a real browser does); exits OPENER_EXIT.
# It follows at once, where a person's browser comes back only after the login page, and
# once only: a follow closed unread as "early" is the product's fault (the port is marked
# opening before the opener starts, lnk_proxy.open_verb.run_opener's `starting`; when the
# mark came after, this opener was closed unread on a busy machine).
OPENER = f"""#!{sys.executable}
import os, sys, urllib.parse, urllib.request
with open(os.environ["OPENED"], "a") as out:
    out.write(sys.argv[1] + "\\n")
with open(os.environ["OPENED"] + ".env", "a") as out:  # what the proxy handed on
    out.write(" ".join(sorted(name for name in os.environ if name.startswith("LNK_"))) + "\\n")
if os.environ.get("FOLLOW") == "later" and os.fork():
    sys.exit(0)  # as a browser: the opener returns at once, the page is followed after
if os.environ.get("FOLLOW"):
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(sys.argv[1]).query)
    redirect = query.get("redirect_uri", [""])[0]
    state = query.get("state", ["s"])[0]
    try:
        urllib.request.urlopen(redirect + "?code=THECODE&state=" + state, timeout=10).read()
    except Exception as error:
        print(error, file=sys.stderr)
sys.exit(int(os.environ.get("OPENER_EXIT", "0")))
"""

# Inside: each argument is a URL opened with the opener named by $HOW; prints one JSON
# line a URL: its exit status and what the opener said on stderr.
OPENS = """
import json, os, subprocess, sys
how = os.environ.get("HOW", "xdg-open")
for url in sys.argv[1:]:
    done = subprocess.run([how, url], capture_output=True, text=True)
    print(json.dumps({"rc": done.returncode, "err": done.stderr}), flush=True)
"""

# Inside: listen on a port of the sandbox's own loopback (127.0.0.1, or ::1 with V6),
# open an authorization page whose redirect_uri comes back there, print what arrived.
LOGIN = """
import http.server, json, os, socket, subprocess, sys, threading, urllib.parse
port, host = int(sys.argv[1]), sys.argv[2]
got = []
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        # Answered first, then noted: the main thread ends the program once `got` holds
        # the path, and an answer not yet written would then never come.
        self.send_response(200); self.send_header("Content-Length", "8"); self.end_headers()
        self.wfile.write(b"signedin")
        got.append(self.path)
class V6(http.server.HTTPServer):
    address_family = socket.AF_INET6
server = (V6 if os.environ.get("V6") else http.server.HTTPServer)(
    ("::1" if os.environ.get("V6") else "127.0.0.1", port), H)
threading.Thread(target=server.serve_forever, daemon=True).start()
redirect = urllib.parse.quote(f"http://{host}:{port}/cb", safe="")
done = subprocess.run(["xdg-open", f"https://auth.example.org/authorize?client_id=c&"
                       f"redirect_uri={redirect}&state=s"], capture_output=True, text=True)
print(json.dumps({"rc": done.returncode, "err": done.stderr}), flush=True)
for _ in range(int(os.environ.get("WAIT", "100"))):
    if got or os.path.exists(os.environ.get("GO", "/nonexistent")):
        break
    threading.Event().wait(0.1)
print(json.dumps({"got": got}), flush=True)
"""


@pytest.fixture
def setup(tmp_path: Path, sandbox_env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """(the folder the sandbox reads, the harness's environment: the recording opener
    first on PATH)."""
    inside = tmp_path / "inside"
    inside.mkdir()
    (inside / "opens.py").write_text(OPENS)
    (inside / "login.py").write_text(LOGIN)
    opener_folder = tmp_path / "opener"
    opener_folder.mkdir()
    opener = opener_folder / "xdg-open"
    opener.write_text(OPENER)
    opener.chmod(0o755)
    env = dict(sandbox_env)
    env["PATH"] = f"{opener_folder}:{env.get('PATH', '/usr/bin:/bin')}"
    env["OPENED"] = str(tmp_path / "opened.txt")
    (tmp_path / "opened.txt").write_text("")
    for name in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY"):
        env.pop(name, None)
    return inside, env


def _spec(write_spec: WriteSpec, inside: Path, extra: str = "") -> Path:
    return write_spec(f'name = "pages"\n[files]\nread = {toml_list(inside)}\n'
                      f"[verbs]\nopen = true\n{extra}")


def _start(spec: Path, env: dict[str, str], *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", *command],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


def _answered(spec: Path, env: dict[str, str], *command: str, answers: list[str]
              ) -> tuple[str, str, list[dict[str, str]]]:
    """Run `command` in a sandbox of `spec` and answer its questions, in order, from the
    queue: (its stdout, its stderr, the questions)."""
    run = _start(spec, env, *command)
    seen: set[str] = set()
    try:
        questions = [answer_next(env, answer, seen) for answer in answers]
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    return out, err, questions


def _results(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _opened(env: dict[str, str]) -> list[str]:
    return Path(env["OPENED"]).read_text().splitlines()


def _asks(env: dict[str, str]) -> list[dict[str, str]]:
    listed = subprocess.run([LNK_SANDBOX, "asks", "--json"], env=env, capture_output=True,
                            text=True, check=True, timeout=SANDBOX_TIMEOUT_SECONDS)
    return list(json.loads(listed.stdout)["asks"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _refused(port: int, host: str = "127.0.0.1") -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.settimeout(3)
        return probe.connect_ex((host, port)) != 0


def test_webbrowser_inside_is_ours_and_yes_opens_the_page_outside(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside)
    code = ("import os, webbrowser; print(os.environ['BROWSER']); "
            "print(os.environ['PATH'].split(':')[0]); "
            "print(webbrowser.open('https://docs.example.org/page?a=1#top'))")
    out, err, (question,) = _answered(spec, env, PYTHON, "-c", code, answers=["yes"])
    browser, first_on_path, opened = out.split()
    assert opened == "True", err
    assert browser == "/.lnk-sandbox/lnk_wrap/browser/lnk-open"
    assert first_on_path == "/.lnk-sandbox/lnk_wrap/browser"
    assert _opened(env) == ["https://docs.example.org/page?a=1#top"]
    # The person's opener gets the harness's environment, never what the proxy holds for
    # the sandbox (its URL secret, placeholders).
    handed = Path(env["OPENED"] + ".env").read_text().split()
    assert "LNK_HOME" in handed
    assert not {"LNK_URL_SECRET", "LNK_PLACEHOLDER", "LNK_SECRET_PLACEHOLDERS"} & set(handed)
    assert "https://docs.example.org/page?a=1#top" in question["question"]
    assert "docs.example.org" in question["title"]
    log = wire_log_of(env, "pages")
    assert "\tallowed\tdocs.example.org\tid=" in log and "kind=open" in log
    assert "page?a=1" not in log and "#top" not in log


@pytest.mark.parametrize("how", ["xdg-open", "sensible-browser", "www-browser"])
def test_each_opener_inside_asks_and_no_opens_nothing(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec, how: str
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside)
    out, err, (_,) = _answered(spec, {**env, "HOW": how}, PYTHON, str(inside / "opens.py"),
                               "https://no.example.org/", answers=["no"])
    [result] = _results(out)
    assert result["rc"] == 4, (out, err)
    assert result["err"] == (f"{how} (lnk-sandbox): not opened: the person did not allow "
                             "opening the page (queue)\n")
    assert _opened(env) == []
    assert ("\trefused\tno.example.org\treason=the person did not allow"
            in wire_log_of(env, "pages"))


def test_what_the_person_reads_is_what_opens_whole(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    """An IDN homograph (Cyrillic a), a bidi override and a zero-width space in the path,
    and an 8 KiB URL: each shown and opened as the same printable ASCII, nothing cut."""
    inside, env = setup
    spec = _spec(write_spec, inside)
    long_url = "https://docs.example.org/p?data=" + "x" * 8192
    urls = ["https://\u0430pple.example/x", "https://docs.example.org/a\u202egpj.exe",
            "https://docs.example.org/b\u200bc", long_url]
    shown = ["https://xn--pple-43d.example/x", "https://docs.example.org/a%E2%80%AEgpj.exe",
             "https://docs.example.org/b%E2%80%8Bc", long_url]
    out, err, questions = _answered(spec, env, PYTHON, str(inside / "opens.py"), *urls,
                                    answers=["yes"] * len(urls))
    assert [result["rc"] for result in _results(out)] == [0, 0, 0, 0], (out, err)
    assert _opened(env) == shown
    for question, form in zip(questions, shown, strict=True):
        assert question["question"].endswith(f"in your browser: {form}")  # whole, as is
        assert question["question"].isascii()
        assert "not shown whole" not in question["question"]


def test_other_schemes_and_userinfo_never_reach_the_person_or_the_opener(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside)
    refused = {
        "javascript:alert(1)": "only http and https URLs are opened",
        "file:///etc/passwd": "only http and https URLs are opened",
        "data:text/html,x": "only http and https URLs are opened",
        "ftp://files.example.org/x": "only http and https URLs are opened",
        "https://user:pw@evil.example/": "a URL with userinfo ('@' before the host) is "
                                         "refused",
        "https://good.example\\@evil.example/": "a backslash in the URL is refused (a "
                                                "browser reads it as '/')",
        "http://2130706433/": "a numeric host must be a dotted IPv4 address (a.b.c.d)",
        # Refused by the sandbox's browser before it is sent (the proxy would too).
        "https://docs.example.org/" + "y" * 17000: "the URL is longer than 16384 bytes",
    }
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON,
                           str(inside / "opens.py"), *refused], env=env, capture_output=True,
                          text=True, timeout=SANDBOX_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL,
                          check=False)
    results = _results(done.stdout)
    assert len(results) == len(refused), done
    for result, reason in zip(results, refused.values(), strict=True):
        assert result["rc"] == 4
        assert result["err"] == f"xdg-open (lnk-sandbox): not opened: {reason}\n"
    assert _opened(env) == []
    assert _asks(env) == []
    log = wire_log_of(env, "pages")
    assert "passwd" not in log and "alert" not in log and "pw@" not in log


def test_a_login_callback_reaches_the_program_once_then_the_port_is_closed(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside)
    port = _free_port()
    out, err, (question,) = _answered(spec, {**env, "FOLLOW": "1"}, PYTHON,
                                      str(inside / "login.py"), str(port), "localhost",
                                      answers=["yes"])
    opened, arrived = _results(out)
    assert opened == {"rc": 0, "err": ""}, err
    assert arrived == {"got": ["/cb?code=THECODE&state=s"]}
    assert f"port {port} of this machine's loopback" in question["question"]
    assert _refused(port)
    log = wire_log_of(env, "pages")
    assert f"\tallowed\tlocalhost:{port}\tid=" in log and "kind=callback" in log
    assert "THECODE" not in log and "/cb" not in log


def test_the_port_takes_one_request_and_reaches_a_program_on_ipv6_loopback(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec, tmp_path: Path
) -> None:
    """The browser's request is passed in to a program listening on ::1 only (a
    `localhost` callback); a second request finds the port closed, on either address."""
    inside, env = setup
    spec = _spec(write_spec, inside)
    port = _free_port()
    go = inside / "go"  # where the program inside sees it
    run = _start(spec, {**env, "V6": "1", "GO": str(go), "WAIT": "200"}, PYTHON,
                 str(inside / "login.py"), str(port), "localhost")
    try:
        answer_next(env, "yes", set())
        assert run.stdout is not None
        assert json.loads(run.stdout.readline()) == {"rc": 0, "err": ""}
        with socket.create_connection(("127.0.0.1", port), timeout=10) as browser:
            browser.sendall(b"GET /cb?code=FIRST HTTP/1.1\r\nHost: localhost\r\n\r\n")
            answer = b""
            while chunk := browser.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ") and b"its program answered 200" in answer
        assert _refused(port) and _refused(port, "::1")
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert _results(out) == [{"got": ["/cb?code=FIRST"]}], err


def _question_waits(env: dict[str, str]) -> dict[str, str]:
    """The first question in the queue, waited for (not answered)."""
    deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        waiting = _asks(env)
        if waiting:
            return waiting[0]
        time.sleep(0.1)
    raise AssertionError("no question waited")


def _nothing_printed(run: subprocess.Popen[str], seconds: float) -> bool:
    """The program has printed nothing within `seconds` (its open is still waiting)."""
    import select

    assert run.stdout is not None
    readable, _, _ = select.select([run.stdout], [], [], seconds)
    return not readable


def _answer(env: dict[str, str], ident: str, answer: str) -> None:
    subprocess.run([LNK_SANDBOX, "answer", ident, answer], env=env, check=True,
                   capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS)


def test_attack_a_request_sent_while_the_question_waits_never_reaches_the_program(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    """A process on this machine connects to the login's callback port while the person
    is asked, and sends a forged `?code=`: nothing listens then (connect refused on
    either loopback), so nothing is sent; after yes, the browser's request is the one
    the program gets, once. (Before: the port listened from before the question, and the
    forged request was passed in as the first one, before the page was even opened.)"""
    inside, env = setup
    spec = _spec(write_spec, inside)
    port = _free_port()
    run = _start(spec, {**env, "FOLLOW": "1"}, PYTHON, str(inside / "login.py"), str(port),
                 "localhost")
    try:
        question = _question_waits(env)
        forged_sent = []
        for host in ("127.0.0.1", "::1"):
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family) as forger:
                forger.settimeout(3)
                if forger.connect_ex((host, port)) == 0:
                    forger.sendall(b"GET /cb?code=FORGED&state=s HTTP/1.1\r\n"
                                   b"Host: localhost\r\n\r\n")
                    forged_sent.append(host)
        _answer(env, question["id"], "yes")
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    opened, arrived = _results(out)
    assert arrived == {"got": ["/cb?code=THECODE&state=s"]}, (forged_sent, err)
    assert forged_sent == [], "the callback port listened while the question waited"
    assert opened == {"rc": 0, "err": ""}, err
    assert _refused(port)


def test_a_no_holds_no_port(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    """While the question waits the port is free (this test binds it itself), and a no
    binds nothing: the port stays free after."""
    inside, env = setup
    spec = _spec(write_spec, inside)
    port = _free_port()
    run = _start(spec, {**env, "WAIT": "1"}, PYTHON, str(inside / "login.py"), str(port),
                 "localhost")
    try:
        question = _question_waits(env)
        with socket.create_server(("127.0.0.1", port)):  # free: nothing holds it
            pass
        _answer(env, question["id"], "no")
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    opened, _ = _results(out)
    assert opened["rc"] == 4, err
    assert "the person did not allow opening the page (queue)" in str(opened["err"])
    with socket.create_server(("127.0.0.1", port)):  # still free after the no
        pass
    assert "localhost:" + str(port) not in wire_log_of(env, "pages")


@pytest.mark.parametrize("taken", [True, False])
def test_attack_a_taken_port_and_a_free_one_read_alike_until_the_answer(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec, taken: bool
) -> None:
    """Mapping this machine's listening ports through the open verb: before the answer,
    a taken port and a free one give the program the same thing, a question and a wait
    for the person (before: a taken port was refused at once, nobody asked). After a
    yes, a taken port is refused (409, to the program and the log), the page not
    opened; a no reads the same for both."""
    inside, env = setup
    spec = _spec(write_spec, inside)
    holder = socket.create_server(("127.0.0.1", 0)) if taken else None
    port = holder.getsockname()[1] if holder is not None else _free_port()
    run = _start(spec, {**env, "WAIT": "1"}, PYTHON, str(inside / "login.py"), str(port),
                 "127.0.0.1")
    try:
        question = _question_waits(env)
        assert f"port {port} of this machine's loopback" in question["question"]
        assert _nothing_printed(run, 1.0), "the open returned before the person answered"
        _answer(env, question["id"], "yes" if taken else "no")
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
        if holder is not None:
            holder.close()
    opened, arrived = _results(out)
    assert opened["rc"] == 4 and arrived == {"got": []}, err
    if taken:
        reason = (f"port {port} of this machine's loopback is taken by another program: the "
                  "login's answer (its code) would go to it; not opened")
        assert opened["err"] == f"xdg-open (lnk-sandbox): not opened: {reason}\n"
        assert f"\trefused\tauth.example.org\treason={reason}" in wire_log_of(env, "pages")
    else:
        assert opened["err"] == ("xdg-open (lnk-sandbox): not opened: the person did not "
                                 "allow opening the page (queue)\n")
    assert _opened(env) == []


@pytest.mark.parametrize("redirect_host", ["evil.example", "localhost.", "0.0.0.0", "[::1]"])  # noqa: S104
def test_a_redirect_elsewhere_is_not_listened_for(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec, tmp_path: Path,
    redirect_host: str,
) -> None:
    """The page opens (asked, yes), but nothing listens on this machine for it."""
    inside, env = setup
    spec = _spec(write_spec, inside)
    port = _free_port()
    go = inside / "go"  # where the program inside sees it
    run = _start(spec, {**env, "GO": str(go), "WAIT": "200"}, PYTHON,
                 str(inside / "login.py"), str(port), redirect_host)
    try:
        question = answer_next(env, "yes", set())
        assert run.stdout is not None
        assert json.loads(run.stdout.readline()) == {"rc": 0, "err": ""}
        assert _refused(port) and _refused(port, "::1")
        go.write_text("")
        out, _ = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert "comes back to port" not in question["question"]
    assert _results(out) == [{"got": []}]


def test_opens_count_as_calls_a_minute(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside, "[network]\ncalls_per_minute = 1\n")
    out, err, (_,) = _answered(spec, env, PYTHON, str(inside / "opens.py"),
                               "https://one.example/", "https://two.example/", answers=["yes"])
    first, second = _results(out)
    assert first["rc"] == 0, err
    assert second["rc"] == 4 and "calls in a minute" in str(second["err"])
    assert _opened(env) == ["https://one.example/"]


def test_the_browser_runs_whatever_commands_lists(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    """[commands] lists only Python: the sandbox's browser still runs (a static program,
    no interpreter granted), and nothing else does (sh is refused)."""
    inside, env = setup
    python = os.path.realpath(PYTHON)
    spec = _spec(write_spec, inside, f"[commands]\nrun = {toml_list(python)}\n")
    code = ("import subprocess, webbrowser\n"
            "ok = webbrowser.open('https://docs.example.org/')\n"
            "try:\n    subprocess.run(['/bin/sh', '-c', 'true']); sh = 'ran'\n"
            "except PermissionError:\n    sh = 'refused'\n"
            "print(ok, sh)")
    out, err, (_,) = _answered(spec, env, python, "-c", code, answers=["yes"])
    assert out.split() == ["True", "refused"], err
    assert "lnk-open" not in err  # the watch names sh (as dash), never the browser
    assert "refused to run /usr/bin/dash" in err or "refused to run /bin/" in err
    assert _opened(env) == ["https://docs.example.org/"]


def test_a_changed_url_secret_and_no_verb_open_nothing(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside)
    code = ("import os, subprocess; base = os.environ['LNK_SANDBOX_URL']; "
            "env = dict(os.environ, LNK_SANDBOX_URL=base[:-1] + ('0' if base[-1] != '0' "
            "else '1')); done = subprocess.run(['xdg-open', 'https://x.example/'], env=env, "
            "capture_output=True, text=True); print(done.returncode, done.stderr.strip())")
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-c", code],
                          env=env, capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    assert done.stdout.strip() == ("4 xdg-open (lnk-sandbox): not opened: the URL secret is "
                                   "not this sandbox's"), done
    plain = write_spec(f"[files]\nread = {toml_list(inside)}\n")
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(plain), "--", PYTHON, "-c",
                           "import os; print(os.environ.get('BROWSER', '-'), "
                           "'lnk_wrap' in os.environ['PATH'])"],
                          env=env, capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    assert done.stdout.split() == ["-", "False"], done
    assert _opened(env) == [] and _asks(env) == []


def test_an_opener_that_fails_is_said_and_the_callback_port_closed(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside)
    port = _free_port()
    out, _, (_,) = _answered(spec, {**env, "OPENER_EXIT": "5", "WAIT": "1"}, PYTHON,
                             str(inside / "login.py"), str(port), "localhost",
                             answers=["yes"])
    opened, _ = _results(out)
    assert opened["rc"] == 4
    assert opened["err"] == ("xdg-open (lnk-sandbox): not opened: the person's opener "
                             "(xdg-open) failed with status 5; not opened\n")
    assert _refused(port)


def test_no_opener_outside_is_said_before_asking(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec, tmp_path: Path
) -> None:
    inside, env = setup
    spec = _spec(write_spec, inside)
    bare = tmp_path / "bare"  # bubblewrap on PATH, and no opener
    bare.mkdir()
    (bare / "bwrap").symlink_to(subprocess.run(["which", "bwrap"], capture_output=True,
                                               text=True, check=True).stdout.strip())
    started = time.monotonic()
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON,
                           str(inside / "opens.py"), "https://x.example/"],
                          env={**env, "PATH": str(bare)}, capture_output=True, text=True,
                          check=False, timeout=SANDBOX_TIMEOUT_SECONDS,
                          stdin=subprocess.DEVNULL)
    [result] = _results(done.stdout)
    assert result == {"rc": 4, "err": "xdg-open (lnk-sandbox): not opened: no opener on this "
                                      "machine: xdg-open is not on the PATH Link was started "
                                      "with; not opened\n"}, done
    assert _asks(env) == [] and time.monotonic() - started < SANDBOX_TIMEOUT_SECONDS


def test_a_kill_switch_thrown_while_the_person_is_asked_holds_over_a_yes(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    """The stop and a yes race: either the kill switch's watch closes the waiting call
    first (its question withdrawn, the program's open unanswered), or the yes lands first
    and the gate, looked at again after the answer, refuses. Never is the page opened."""
    inside, env = setup
    spec = _spec(write_spec, inside)
    run = _start(spec, env, PYTHON, str(inside / "opens.py"), "https://late.example/")
    try:
        deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
        while not _asks(env) and time.monotonic() < deadline:
            time.sleep(0.1)
        waiting = _asks(env)
        assert waiting
        subprocess.run([LNK_SANDBOX, "stop"], env=env, check=True, capture_output=True,
                       timeout=SANDBOX_TIMEOUT_SECONDS)
        subprocess.run([LNK_SANDBOX, "answer", waiting[0]["id"], "yes"], env=env,
                       check=False, capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS)
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
        subprocess.run([LNK_SANDBOX, "stop", "--clear"], env=env, check=False,
                       capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS)
    [result] = _results(out)
    assert result["rc"] == 4, err
    assert result["err"] in (
        "xdg-open (lnk-sandbox): not opened: the proxy gave no answer\n",
        "xdg-open (lnk-sandbox): not opened: the kill switch is on (lnk-sandbox stop): no "
        "call goes out; `lnk-sandbox stop --clear` lifts it\n")
    assert _opened(env) == []


def test_the_line_wrap_prints_opens_too(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    """A harness runs the line `wrap` prints (no `site`: the launcher was found failing
    to import orjson there for any verb behind a URL secret)."""
    import shlex

    inside, env = setup
    spec = _spec(write_spec, inside)
    line = subprocess.run([LNK_SANDBOX, "wrap", "--spec", str(spec), "--", PYTHON,
                           str(inside / "opens.py"), "javascript:x", "https://w.example/"],
                          env=env, capture_output=True, text=True, check=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS).stdout
    run = subprocess.Popen(shlex.split(line), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        answer_next(env, "yes", set())
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert [result["rc"] for result in _results(out)] == [4, 0], err
    assert _opened(env) == ["https://w.example/"]


# Inside: a login as CLIs make it (google-auth-oauthlib's InstalledAppFlow, which gcloud-style
# tools use): a local server on localhost:PORT, webbrowser.open of the authorization page,
# the code taken from the callback and exchanged at the token endpoint (this machine's
# loopback, relayed in as a [localhost] port; plain HTTP allowed for the test only).
OAUTH_CLIENT = """
import json, os, sys
os.environ["OAUTHLIB_INSECURE_TRANSPORT"] = "1"
from google_auth_oauthlib.flow import InstalledAppFlow
port, token_port = int(sys.argv[1]), int(sys.argv[2])
config = {"installed": {"client_id": "cid", "client_secret": "csecret",
                        "auth_uri": "https://auth.example.org/o/oauth2/auth",
                        "token_uri": f"http://127.0.0.1:{token_port}/token",
                        "redirect_uris": ["http://localhost"]}}
flow = InstalledAppFlow.from_client_config(config, scopes=["openid"])
credentials = flow.run_local_server(host="localhost", port=port, open_browser=True,
                                    timeout_seconds=60)
print(json.dumps({"token": credentials.token}), flush=True)
"""


def test_a_cli_style_oauth_login_gets_its_token(
    setup: tuple[Path, dict[str, str]], write_spec: WriteSpec
) -> None:
    import http.server
    import threading
    import urllib.parse

    from tests.conftest import VENV, VENV_PYTHON

    inside, env = setup
    (inside / "oauth.py").write_text(OAUTH_CLIENT)
    posted: list[dict[str, list[str]]] = []

    class Token(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            posted.append(urllib.parse.parse_qs(self.rfile.read(length).decode()))
            body = b'{"access_token": "AT-1", "token_type": "Bearer", "expires_in": 3600}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    token_server = http.server.HTTPServer(("127.0.0.1", 0), Token)
    token_port = token_server.server_address[1]
    threading.Thread(target=token_server.serve_forever, daemon=True).start()
    spec = write_spec(f'name = "pages"\n[files]\nread = {toml_list(inside, VENV)}\n'
                      f"[verbs]\nopen = true\n[localhost]\nports = [{token_port}]\n")
    port = _free_port()
    try:
        out, err, (question,) = _answered(spec, {**env, "FOLLOW": "later"}, VENV_PYTHON,
                                          str(inside / "oauth.py"), str(port),
                                          str(token_port), answers=["yes"])
    finally:
        token_server.shutdown()
    assert _results(out) == [{"token": "AT-1"}], err
    assert f"redirect_uri=http%3A%2F%2Flocalhost%3A{port}%2F" in question["question"]
    assert [form["code"] for form in posted] == [["THECODE"]]
    assert _refused(port)
