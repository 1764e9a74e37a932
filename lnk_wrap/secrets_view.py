"""lnk-sandbox secret set / list / remove: the store of secrets, for a person.

The value comes from standard input only (never argv, which every process of the user
can read in /proc, nor the environment); from a terminal it is read without echo. It is
kept as bytes and never decoded, printed or put in a message (lnk_common.secrets).

`secret set NAME --rule FILE` keeps the secret with its rule (lnk_proxy.secret_rules). Order:
the rule file read and parsed (an error names the file and the field) → the value read →
the value checked against the rule (it can stand where the rule puts it; the placeholder's
shape can be made from it) → the rule written → the value written. Anything refused before
the writes leaves the store as it was. Without --rule, a rule already kept with NAME stays,
and a new value (a rotated token) is checked against it.
"""

from __future__ import annotations

import sys

from lnk_common.secrets import (
    MAX_SECRET_BYTES,
    SecretError,
    list_secrets,
    name_problem,
    read_rule,
    remove_secret,
    rule_names,
    write_rule,
    write_secret,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["read_stdin_up_to", "secrets"]

EXIT_USAGE = 2


def secrets(settings: str, arguments: Mapping[str, object]) -> int:
    """One `secret` command; SecretError is left to the caller (one line, exit 125)."""
    if arguments["list"]:
        names = list_secrets(settings)
        if arguments["--json"]:
            import orjson

            sys.stdout.buffer.write(orjson.dumps({"secrets": names,
                                                  "rules": rule_names(settings)}) + b"\n")
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
        rule_file = arguments.get("--rule")
        given = _rule_from_file(name, rule_file) if isinstance(rule_file, str) else None
        value = _value_from_stdin(name)
        _check_against_rule(settings, name, value, given)
        if given is not None:
            write_rule(settings, name, given)
        write_secret(settings, name, value)
        print(f"the secret {name} is stored" + (" with its rule" if given is not None else ""))
        return 0
    if remove_secret(settings, name):
        print(f"the secret {name} is removed")
        return 0
    print(f"lnk-sandbox: no secret named {name}", file=sys.stderr)
    return 1


def _rule_from_file(name: str, path: str) -> bytes:
    """The bytes of the rule file `path`, parsed here so a rule too weak to hold is refused
    (naming the file and the field) before anything is read from stdin or stored."""
    from lnk_proxy.secret_rules import MAX_RULE_BYTES, SecretRuleError, parse_rule

    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_RULE_BYTES + 1)
    except OSError as error:
        raise SecretError(f"the secret {name} is not stored: the rule file {path} cannot be "
                          f"read: {error.strerror}") from None
    try:
        parse_rule(raw)
    except SecretRuleError as error:
        raise SecretError(f"the secret {name} is not stored: the rule in {path} is refused: "
                          f"{error.reason}") from None
    return raw


def _check_against_rule(settings: str, name: str, value: bytes, given: bytes | None) -> None:
    """The value must stand where its rule (the one given, else the one kept) puts it."""
    from lnk_proxy.secret_rules import SecretRuleError, check_secret, parse_rule

    raw = given
    if raw is None:
        if name not in rule_names(settings):
            return
        raw = read_rule(settings, name)
    try:
        check_secret(parse_rule(raw), value)
    except SecretRuleError as error:
        where = "the rule given" if given is not None else "the rule kept with it"
        raise SecretError(f"the secret {name} is not stored: {error.reason} ({where})") from None


def read_stdin_up_to(limit: int) -> bytes:
    """Standard input's bytes, at most `limit` (a pipe gives them in pieces)."""
    stream = sys.stdin.buffer
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


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
        # The value, its newline, and one byte to see excess.
        value = read_stdin_up_to(MAX_SECRET_BYTES + 2)
    if value.endswith(b"\n"):
        value = value[:-1]
    return value
