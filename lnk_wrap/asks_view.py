"""lnk-sandbox asks / answer: the person's side of the queue of questions (lnk_ask.queue).

`answer` decides a question only when it still waits and nothing has answered it: the
queue's answer file is linked into place once (lnk_ask.queue says how), so the person is
told exactly whether their answer was the one taken. A bad answer word is a usage error
(exit 2); an unknown, ended or already answered question is one line, exit 125, as the
other verbs' refusals.
"""

from __future__ import annotations

import sys
import time

from lnk_ask.queue import ANSWERS, AskQueue, QueueError
from lnk_ask.text import plain

__all__ = ["answer", "asks"]

EXIT_REFUSED = 125
EXIT_USAGE = 2


def asks(settings: str, *, as_json: bool) -> int:
    try:
        waiting = AskQueue(settings).waiting()
    except QueueError as error:
        print(f"lnk-sandbox: {error}", file=sys.stderr)
        return EXIT_REFUSED
    shown = [{"id": _plain(record.get("id")), "wire": _plain(record.get("wire")),
              "title": _plain(record.get("title")), "question": _plain(record.get("question")),
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
        print(f"{record['id']}  wire {record['wire']}  since {since}  {record['title']}\n"
              f"    {record['question']}\n"
              f"    answer with: lnk-sandbox answer {record['id']} yes|no")
    return 0


def _plain(value: object) -> str:
    """A record's text as the asker wrote it (plain ASCII already); escaped again only
    when it is not, so a record made by hand (never by a sandbox: the folder is hidden in
    every one) cannot drive the terminal either."""
    text = str(value) if value is not None else ""
    return text if all(" " <= char <= "~" for char in text) else plain(text)


def answer(settings: str, ident: str, given: str) -> int:
    if given not in ANSWERS:
        print(f"lnk-sandbox: the answer is yes or no, not {plain(given, 40)!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        AskQueue(settings).answer(ident, given)
    except QueueError as error:
        print(f"lnk-sandbox: {plain(str(error), 400)}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"answered {given}: {ident}")
    return 0
