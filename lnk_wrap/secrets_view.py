"""lnk-sandbox secret set / list / remove: the store of secrets, for a person.

The value comes from standard input only (never argv, which every process of the user
can read in /proc, nor the environment); from a terminal it is read without echo. It is
kept as bytes and never decoded, printed or put in a message (lnk_common.secrets).
"""

from __future__ import annotations

import sys

from lnk_common.secrets import (
    MAX_SECRET_BYTES,
    SecretError,
    list_secrets,
    name_problem,
    remove_secret,
    write_secret,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["secrets"]

EXIT_USAGE = 2


def secrets(settings: str, arguments: Mapping[str, object]) -> int:
    """One `secret` verb; SecretError is left to the caller (one line, exit 125)."""
    if arguments["list"]:
        names = list_secrets(settings)
        if arguments["--json"]:
            import orjson

            sys.stdout.buffer.write(orjson.dumps({"secrets": names}) + b"\n")
        else:
            for name in names:
                print(name)
        return 0
    name = str(arguments["NAME"])
    problem = name_problem(name)
    if problem:
        print(f"lnk-sandbox: {problem}; nothing was done", file=sys.stderr)
        return EXIT_USAGE
    if arguments["set"]:
        write_secret(settings, name, _value_from_stdin(name))
        print(f"the secret {name} is stored")
        return 0
    if remove_secret(settings, name):
        print(f"the secret {name} is removed")
        return 0
    print(f"lnk-sandbox: no secret named {name}", file=sys.stderr)
    return 1


def _value_from_stdin(name: str) -> bytes:
    """The value on standard input, one trailing newline taken off (what `echo` and a
    typed line add); read to one byte past the limit so an oversized value is refused
    without reading it all."""
    if sys.stdin is None:
        raise SecretError(f"the secret {name} is not stored: no standard input to read it from")
    if sys.stdin.isatty():
        import getpass

        value = getpass.getpass(f"the value of {name} (not shown): ").encode()
    else:
        stream = sys.stdin.buffer
        chunks: list[bytes] = []
        size = 0
        limit = MAX_SECRET_BYTES + 2  # the value, its newline, and one byte to see excess
        while size < limit:
            chunk = stream.read(limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        value = b"".join(chunks)
    if value.endswith(b"\n"):
        value = value[:-1]
    return value
