"""lnk-sandbox-ask: ask the person one question; exit 0 for yes, 1 for no.

Usage:
  lnk-sandbox-ask --title=T --question=Q [--allows=TEXT] [--timeout=SECONDS]
                  [--wire=NAME] [--json] [--whole] [--settings=DIR]
  lnk-sandbox-ask (-h | --help)

Every way at once (a dialog on the screen, the terminal with a code typed back, the
queue answered by `lnk-sandbox answer ID yes|no`); the first answer wins. No answer in
SECONDS (default 120) is no; an error is no. Each question and answer is logged in
Link's settings (sandbox/asks.log). With no screen and no terminal, it says at once on
standard error that the question waits in the queue, and how to answer it.

Options:
  --title=T            A few words: what is asking, e.g. "Tool call: github".
  --question=Q         The question, shown in plain ASCII (controls and non-ASCII escaped);
                       `-`: read it from standard input (UTF-8, at most 1 MiB), which
                       keeps a long question (a tool's arguments) out of argv.
  --allows=TEXT        What a yes allows, in a few words ("sandbox W, server demo, tool
                       wipe"): shown on the terminal's line with the code, in the dialog
                       and in `lnk-sandbox asks` [default: what the wire asks: T].
  --timeout=SECONDS    How long to wait for an answer [default: 120].
  --wire=NAME          The wire that asks (named in the queue and the log) [default: ask].
  --json               Print {"answer": "yes"|"no", "how": ..., "id": ...}.
  --whole              Show the question whole up to 17 KiB (a page's URL), not cut at
                       2,000 characters.
  --settings=DIR       Link's settings folder as found already (the proxy passes it);
                       default: the one LNK_HOME, XDG_CONFIG_HOME or HOME names.

Exit status: 0 yes; 1 no (a no, the timeout, an error); 2 bad usage.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["UsageError", "main", "parse"]

EXIT_YES = 0
EXIT_NO = 1
EXIT_USAGE = 2
# A question read from standard input: a tool call's arguments may be long, but what is
# kept is cut at lnk_ask.text.MAX_KEPT_QUESTION_CHARS (with a digest of the whole), so
# more than this is not a question a person could judge; refused as bad usage
# (ask_async cuts a longer one at text.MAX_ASKED_CHARS first, saying so).
MAX_QUESTION_INPUT_BYTES = 1 << 20
_VALUED = ("--title", "--question", "--allows", "--timeout", "--wire", "--settings")
_FLAGS = ("--json", "--whole")


class UsageError(Exception):
    """The command line cannot be read; exit 2."""


def parse(words: list[str]) -> dict[str, str | bool]:
    """The options, each once, by full name, `--name=value` or `--name value` (sans IO;
    this helper runs isolated, without docopt: lnk_wrap.helpers)."""
    found: dict[str, str | bool] = {"--timeout": "120", "--wire": "ask", "--json": False,
                                    "--whole": False}
    seen: set[str] = set()
    index = 0
    while index < len(words):
        word = words[index]
        name, equals, value = word.partition("=")
        if name in seen:
            raise UsageError(f"{name} is given twice")
        if name in _FLAGS and not equals:
            found[name] = True
        elif name in _VALUED:
            if not equals:
                index += 1
                if index == len(words):
                    raise UsageError(f"{name} needs a value")
                value = words[index]
            found[name] = value
        else:
            raise UsageError(f"unknown option {word.partition('=')[0][:40]!r}")
        seen.add(name)
        index += 1
    for needed in ("--title", "--question"):
        if needed not in found:
            raise UsageError(f"{needed} is required")
    return found


def _usage_exit(message: str) -> None:
    usage = __doc__.split("\n\n")[1] if __doc__ else ""
    sys.stderr.write(f"{usage}\nlnk-sandbox-ask: {message}\n")
    sys.exit(EXIT_USAGE)


def _tell(line: str) -> None:
    sys.stderr.write(line)
    sys.stderr.flush()


def _end(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_NO)  # the finally blocks answer no and clean up


def main(argv: list[str] | None = None) -> None:
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] in (["-h"], ["--help"]):
        sys.stdout.write(__doc__ or "")
        sys.exit(0)
    try:
        options = parse(words)
        timeout = float(str(options["--timeout"]))
    except UsageError as error:
        _usage_exit(str(error))
        return
    except ValueError:
        _usage_exit("--timeout is a number of seconds")
        return
    question = str(options["--question"])
    if question == "-":
        data = sys.stdin.buffer.read(MAX_QUESTION_INPUT_BYTES + 1)
        if len(data) > MAX_QUESTION_INPUT_BYTES:
            _usage_exit(f"the question on standard input is longer than "
                        f"{MAX_QUESTION_INPUT_BYTES} bytes")
        question = data.decode("utf-8", "surrogateescape")
    signal.signal(signal.SIGTERM, _end)
    signal.signal(signal.SIGHUP, _end)
    from lnk_ask.asker import Answer, AskUsageError, ask

    settings = options.get("--settings")
    try:
        if not isinstance(settings, str):
            from lnk_common.settings import SettingsError, settings_folder

            try:
                settings = settings_folder(os.environ).root
            except SettingsError as error:
                found = Answer("no", "error", reason=str(error))
                settings = None
        if isinstance(settings, str):
            found = ask(settings, str(options["--wire"]), str(options["--title"]),
                        question, timeout, whole=options["--whole"] is True,
                        allows=str(options.get("--allows", "")), tell=_tell)
    except AskUsageError as error:
        _usage_exit(str(error))
        return
    if found.how == "error" and found.reason:
        sys.stderr.write(f"lnk-sandbox-ask: no: {found.reason}\n")
    if options["--json"]:
        import json

        sys.stdout.write(json.dumps(found.as_json()) + "\n")
        sys.stdout.flush()
    sys.exit(EXIT_YES if found.yes else EXIT_NO)


if __name__ == "__main__":
    main()
