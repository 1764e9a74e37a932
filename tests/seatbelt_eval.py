"""A small evaluator of the Seatbelt profile language, for the subset lnk_wrap.seatbelt emits.

Written for the tests, never used by the product: it reads a profile's text as the
profile language's s-expressions (strings, `#"…"` regular expressions, symbols, lists),
binds every `(param "NAME")` from the parameters given (a parameter the profile names and
is not given is an error, as sandbox-exec's is), and answers "may this process read /
write / run / stat this path, connect to or listen on this loopback port, look up this
mach service" by Seatbelt's documented order: the last rule whose operation and filters
match decides; `(deny default)` first, so nothing matching is a denial.

Its model of the language, each from Apple's and the peers' public profiles: an operation
ending in `*` names every operation it is a prefix of (`file-read*` covers
`file-read-data` and `file-read-metadata`); a rule's filters match when any does, a rule
with none matches always; `subpath` is the path or anything under it, `literal` the path
itself, `regex` a search of the path; `require-all`, `require-any`, `require-not` combine
filters; `(remote ip "localhost:PORT")` and `(local ip "HOST:PORT")` take `localhost` or
`*` as the host and a port or `*`. Anything else in a rule the query reaches is an
SbplError, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["Evaluated", "Regex", "SbplError", "Symbol", "evaluate", "parse"]


class SbplError(Exception):
    """Not the profile language, or not the subset this evaluator knows."""


class Symbol(str):
    """A bare word of the language (an operation, a filter's name), not a string."""


class Regex(str):
    """A `#"…"` regular expression."""


_TOKEN = re.compile(r'\s+|;[^\n]*|(?P<open>\()|(?P<close>\))|#"(?P<regex>(?:[^"\\]|\\.)*)"'
                    r'|"(?P<string>(?:[^"\\]|\\.)*)"|(?P<symbol>[^\s()";]+)')


def _unescaped(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse(text: str) -> list[object]:
    """The profile's top-level forms, each a list, a string, a Regex or a Symbol."""
    stack: list[list[object]] = [[]]
    position = 0
    while position < len(text):
        found = _TOKEN.match(text, position)
        if found is None:
            raise SbplError(f"cannot read the profile at {position}: "
                            f"{text[position:position + 20]!r}")
        position = found.end()
        if found["open"]:
            stack.append([])
        elif found["close"]:
            if len(stack) == 1:
                raise SbplError(f"a ')' closes nothing at {position}")
            done = stack.pop()
            stack[-1].append(done)
        elif found["regex"] is not None:
            stack[-1].append(Regex(found["regex"]))
        elif found["string"] is not None:
            stack[-1].append(_unescaped(found["string"]))
        elif found["symbol"] is not None:
            stack[-1].append(Symbol(found["symbol"]))
    if len(stack) != 1:
        raise SbplError("a '(' is never closed")
    return stack[0]


class _Query:
    __slots__ = ("local", "operation", "path", "remote", "service")

    def __init__(self, operation: str, *, path: str = "", remote: str = "", local: str = "",
                 service: str = "") -> None:
        self.operation = operation
        self.path = path
        self.remote = remote
        self.local = local
        self.service = service


def _covers(rule_operation: str, operation: str) -> bool:
    if rule_operation in ("default", operation):
        return True
    return rule_operation.endswith("*") and operation.startswith(rule_operation[:-1])


def _address_matches(pattern: str, host: str, port: str) -> bool:
    want_host, _, want_port = pattern.rpartition(":")
    if want_host not in ("localhost", "*"):
        raise SbplError(f"Seatbelt takes localhost or * as the host, not {want_host!r}")
    return want_port in ("*", port) and (want_host == "*" or host == "localhost")


class Evaluated:
    """A profile bound to its parameters, ready for questions."""

    def __init__(self, forms: list[object], parameters: Mapping[str, str]) -> None:
        self.parameters = dict(parameters)
        self.rules: list[tuple[str, tuple[str, ...], list[object]]] = []
        for form in forms:
            if not isinstance(form, list) or not form:
                raise SbplError(f"not a rule: {form!r}")
            head = form[0]
            if head == "version":
                continue
            if head not in ("allow", "deny"):
                raise SbplError(f"not allow or deny: {head!r}")
            operations = tuple(str(item) for item in form[1:] if isinstance(item, Symbol))
            filters: list[object] = [item for item in form[1:] if isinstance(item, list)
                                     and item[:1] != ["with"]]
            self.rules.append((str(head), operations, filters))
        self.named = self._names(forms)
        missing = self.named - self.parameters.keys()
        if missing:
            raise SbplError(f"parameters named but not given: {sorted(missing)}")

    def _names(self, forms: list[object]) -> set[str]:
        names: set[str] = set()
        for form in forms:
            if isinstance(form, list):
                if form[:1] == ["param"] and len(form) == 2 and isinstance(form[1], str):
                    names.add(form[1])
                names |= self._names(form)
        return names

    def _value(self, form: object) -> str:
        if isinstance(form, str) and not isinstance(form, (Symbol, Regex)):
            return form
        if isinstance(form, list) and form[:1] == ["param"] and len(form) == 2:
            return self.parameters[str(form[1])]
        if isinstance(form, list) and form[:1] == ["string-append"]:
            return "".join(self._value(part) for part in form[1:])
        raise SbplError(f"not a string: {form!r}")

    def _matches(self, form: object, query: _Query) -> bool:
        if not isinstance(form, list) or not form:
            raise SbplError(f"not a filter: {form!r}")
        name, arguments = form[0], form[1:]
        if name == "require-not":
            return not self._matches(arguments[0], query)
        if name == "require-all":
            return all(self._matches(part, query) for part in arguments)
        if name == "require-any":
            return any(self._matches(part, query) for part in arguments)
        if name in ("subpath", "literal", "regex"):
            if not query.path:
                return False
            if name == "regex":
                if not isinstance(arguments[0], Regex):
                    raise SbplError(f"a regex filter takes #\"…\": {arguments[0]!r}")
                return re.search(arguments[0], query.path) is not None
            value = self._value(arguments[0])
            if name == "literal":
                return query.path == value
            return query.path == value or query.path.startswith(value.rstrip("/") + "/")
        if name in ("remote", "local") and arguments[:1] == ["ip"]:
            given = query.remote if name == "remote" else query.local
            if not given:
                return False
            host, _, port = given.rpartition(":")
            return _address_matches(self._value(arguments[1]), host, port)
        if name == "global-name":
            return bool(query.service) and query.service == self._value(arguments[0])
        raise SbplError(f"a filter this evaluator does not know: {name!r}")

    def decide(self, query: _Query) -> bool:
        verdict: bool | None = None
        for action, operations, filters in self.rules:
            if not any(_covers(operation, query.operation) for operation in operations):
                continue
            if not filters or any(self._matches(item, query) for item in filters):
                verdict = action == "allow"
        if verdict is None:
            raise SbplError(f"no rule decides {query.operation}: no (deny default)")
        return verdict

    def may_read(self, path: str) -> bool:
        return self.decide(_Query("file-read-data", path=path))

    def may_stat(self, path: str) -> bool:
        return self.decide(_Query("file-read-metadata", path=path))

    def may_write(self, path: str) -> bool:
        return self.decide(_Query("file-write-data", path=path))

    def may_create(self, path: str) -> bool:
        return self.decide(_Query("file-write-create", path=path))

    def may_rename(self, path: str) -> bool:
        return self.decide(_Query("file-write-unlink", path=path))

    def may_run(self, path: str) -> bool:
        return self.decide(_Query("process-exec", path=path))

    def may_connect(self, port: int) -> bool:
        return self.decide(_Query("network-outbound", remote=f"localhost:{port}"))

    def may_listen(self, port: int) -> bool:
        return self.decide(_Query("network-bind", local=f"localhost:{port}"))

    def may_look_up(self, service: str) -> bool:
        return self.decide(_Query("mach-lookup", service=service))


def evaluate(text: str, parameters: Mapping[str, str]) -> Evaluated:
    return Evaluated(parse(text), parameters)
