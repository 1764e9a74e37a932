"""lnk-sandbox asks / answer: the person's side of the queue of questions (lnk_ask.queue).

`answer` decides a question only when it still waits and nothing has answered it: the
queue's answer file is linked into place once (lnk_ask.queue says how), so the person is
told exactly whether their answer was the one taken. A bad answer word is a usage error
(exit 2); an unknown, ended or already answered question is one line, exit 125, as the
other commands' refusals.

`asks --wait` is for a person or script with no screen: it looks at the queue every
WAIT_POLL_SECONDS until a question waits, then shows what waits (as `asks` does) and
exits 0; after --timeout with none, one line and exit 1.
"""

from __future__ import annotations

import sys
import time

from lnk_ask.queue import ANSWERS, AskQueue, QueueError
from lnk_ask.text import printable, spaces_shown

__all__ = ["WAIT_POLL_SECONDS", "answer", "asks", "wait_for_asks"]

EXIT_REFUSED = 125
EXIT_USAGE = 2
EXIT_NONE_CAME = 1
# How often --wait looks at the queue: a question waits up to two minutes for its
# answer, so a quarter of a second is nothing of it, and a look is one listdir.
WAIT_POLL_SECONDS = 0.25


def wait_for_asks(settings: str, *, as_json: bool, timeout: str | None) -> int:
    """Wait until a question waits, then show the waiting ones (exit 0); after
    `timeout` seconds with none, say so (exit 1)."""
    limit = None
    if timeout is not None:
        try:
            limit = float(timeout)
        except ValueError:
            limit = -1.0
        if not limit >= 0:
            print(f"lnk-sandbox: --timeout {printable(timeout, 40)!r}: give a number of seconds",
                  file=sys.stderr)
            return EXIT_USAGE
    deadline = None if limit is None else time.monotonic() + limit
    try:
        while True:
            try:
                if AskQueue(settings).waiting():
                    return asks(settings, as_json=as_json)
            except QueueError as error:
                print(f"lnk-sandbox: {error}", file=sys.stderr)
                return EXIT_REFUSED
            if deadline is not None and time.monotonic() >= deadline:
                print(f"lnk-sandbox: no question came within {limit:g} s", file=sys.stderr)
                return EXIT_NONE_CAME
            time.sleep(WAIT_POLL_SECONDS if deadline is None
                       else max(0.0, min(WAIT_POLL_SECONDS, deadline - time.monotonic())))
    except KeyboardInterrupt:
        return 128 + 2  # as a shell reports SIGINT


def asks(settings: str, *, as_json: bool, show: str | None = None) -> int:
    if show is not None:
        return _show(settings, show, as_json=as_json)
    try:
        waiting = AskQueue(settings).waiting()
    except QueueError as error:
        print(f"lnk-sandbox: {error}", file=sys.stderr)
        return EXIT_REFUSED
    shown = [{"id": _printable(record.get("id")), "wire": _printable(record.get("wire")),
              "title": _printable(record.get("title")),
              "question": _printable(record.get("question")),
              "allows": _printable(record.get("allows")),
              "since": record.get("since") if isinstance(record.get("since"), float | int)
              else 0}
             for record in waiting]
    if as_json:
        import json

        print(json.dumps({"asks": shown}))
        return 0
    if not shown:
        print("no question waits")
        return 0
    for record in shown:
        since = time.strftime("%H:%M:%S", time.localtime(float(str(record["since"]))))
        # Runs of spaces written out (not in --json): padding cannot line the program's
        # words up under the lines of ours around them.
        print(f"{record['id']}  wire {record['wire']}  since {since}  {record['title']}\n"
              f"    {spaces_shown(str(record['question']))}\n"
              f"    a yes allows: {record['allows']}\n"
              f"    answer with: lnk-sandbox answer {record['id']} yes|no "
              f"(all of it: lnk-sandbox asks --show {record['id']})")
    return 0


def _show(settings: str, ident: str, *, as_json: bool) -> int:
    """One waiting question, whole as the asker kept it (lnk_ask.text's
    MAX_KEPT_QUESTION_CHARS, a longer one cut there saying so, with its digest)."""
    try:
        record = AskQueue(settings).question(ident)
    except QueueError as error:
        print(f"lnk-sandbox: {printable(str(error), 400)}", file=sys.stderr)
        return EXIT_REFUSED
    shown = {name: _printable(record.get(name)) for name in ("id", "wire", "title", "allows")}
    shown["question"] = _printable(record.get("whole") or record.get("question"))
    if as_json:
        import json

        print(json.dumps(shown))
        return 0
    print(f"{shown['id']}  wire {shown['wire']}  {shown['title']}\n"
          f"a yes allows: {shown['allows']}\n"
          f"the question, whole (runs of spaces counted; --json gives them as they are):\n"
          f"{spaces_shown(shown['question'])}\n"
          f"answer with: lnk-sandbox answer {shown['id']} yes|no")
    return 0


def _printable(value: object) -> str:
    """A record's text as the asker wrote it (printable ASCII already); escaped again only
    when it is not, so a record made by hand (never by a sandbox: the folder is hidden in
    every one) cannot drive the terminal either."""
    text = str(value) if value is not None else ""
    return text if all(" " <= char <= "~" for char in text) else printable(text)


def answer(settings: str, ident: str, given: str) -> int:
    if given not in ANSWERS:
        print(f"lnk-sandbox: the answer is yes or no, not {printable(given, 40)!r}",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        AskQueue(settings).answer(ident, given)
    except QueueError as error:
        print(f"lnk-sandbox: {printable(str(error), 400)}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"answered {given}: {ident}")
    return 0
