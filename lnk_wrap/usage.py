"""What was wrong with a command line, in one line, and the verb's own usage (sans IO).

Job: docopt says only that the words did not fit (and, for words left over, its own
`Warning: found unmatched (duplicate?) arguments [Argument(None, …)]`), then the whole
usage. So when docopt refuses an argv, `diagnose` reads the same usage text (lnk_wrap.cli's
docstring, the one place the verbs are written) and names the first thing wrong: an
unknown verb, an unknown option or one of another verb, a value where none goes or none
where one must, a missing `--` before a command that has options of its own, a missing
command, option or argument, a word too many. `verb_help` is `VERB --help`: that verb's
usage, its paragraph and its options.

Trust: the words are the person's; what is repeated of them is a verb or an option's
name, or a word cut to SHOWN_CHARS and escaped, never an option's value, and never a
word of `secret` (a value typed where it must not be is a secret).
"""

from __future__ import annotations

import re

__all__ = ["ON_STANDARD_INPUT", "SHOWN_CHARS", "Form", "Verdict", "diagnose", "forms",
           "options", "usage_of", "verb_help", "verbs"]

# A word repeated in a message is cut here: enough to recognise it.
SHOWN_CHARS = 40
PROGRAM = "lnk-sandbox"
_HELP = ("-h", "--help")
_OPTION_LINE = re.compile(r"^\s+(-{1,2}[A-Za-z][\w-]*)(?:[= ]([A-Z][A-Z_]*))?(?:\s{2,}|$)")


class Form:
    """One usage line: its verb, its sub-verb (`secret set`), its arguments before any
    command, whether it takes a command, its options, and those it cannot go without."""

    __slots__ = ("arguments", "command", "line", "optional_arguments", "options",
                 "required", "subverb", "verb")

    def __init__(self, line: str) -> None:
        self.line = line
        tokens = re.sub(r"([()\[\]|])", r" \1 ", line).split()[1:]
        self.verb = tokens[0]
        self.subverb = ""
        self.arguments: list[str] = []
        self.optional_arguments = 0
        self.command = False
        self.options: list[str] = []
        self.required: list[str] = []
        depth = 0
        for index, token in enumerate(tokens[1:], 1):
            if token in ("[", "("):
                depth += 1
            elif token in ("]", ")"):
                depth -= 1
            elif token in ("|", "--", "..."):
                continue
            elif token.startswith("-"):
                name = token.partition("=")[0].removesuffix("...")
                self.options.append(name)
                if depth == 0:
                    self.required.append(name)
            elif token.removesuffix("...") == "COMMAND":
                self.command = True
            elif token.islower() and index == 1:
                self.subverb = token
            elif token.isupper() and not (tokens[index - 1].startswith("-")
                                          and not tokens[index - 1].startswith("--")):
                # (a short option's value, `-n N`, is no argument)
                self.arguments.append(token)
                self.optional_arguments += depth > 0


def _section(doc: str, title: str) -> list[str]:
    lines = doc.splitlines()
    start = next(index for index, line in enumerate(lines) if line.strip() == title) + 1
    found = []
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break
        found.append(line)
    return found


def forms(doc: str) -> list[Form]:
    """The usage lines (a continuation line joined to its own), as forms; the global
    ones (`(-h | --help)`, `--version`) left out."""
    joined: list[str] = []
    for line in _section(doc, "Usage:"):
        if line.strip().startswith(PROGRAM + " "):
            joined.append(line.strip())
        elif line.strip() and joined:
            joined[-1] += " " + line.strip()
    return [Form(line) for line in joined if not line.split()[1].startswith(("-", "("))]


def options(doc: str) -> dict[str, str]:
    """Every option the Options section lists, with its value's name ("" for none), and
    the global ones."""
    found = {"-h": "", "--help": "", "--version": ""}
    for line in _section(doc, "Options:"):
        matched = _OPTION_LINE.match(line)
        if matched:
            found[matched.group(1)] = matched.group(2) or ""
    return found


def verbs(doc: str) -> list[str]:
    return list(dict.fromkeys(form.verb for form in forms(doc)))


def usage_of(doc: str, verb: str, subverb: str = "") -> list[str]:
    """The verb's usage lines (a sub-verb's alone when it is known)."""
    return [form.line for form in forms(doc)
            if form.verb == verb and (not subverb or form.subverb == subverb)]


def verb_help(doc: str, verb: str) -> str:
    """`VERB --help`: its usage, its paragraph of the Verbs section, its options."""
    lines = ["Usage:", *(f"  {line}" for line in usage_of(doc, verb)), ""]
    paragraph: list[str] = []
    for line in _section(doc, "Verbs:"):
        head = line[2:].split(" ", 1)[0] if line.startswith("  ") and line[2:3] != " " else ""
        if head:
            if paragraph:
                break
            if head == verb:
                paragraph.append(line)
        elif paragraph:
            paragraph.append(line)
    lines += paragraph
    used = {name for form in forms(doc) if form.verb == verb for name in form.options}
    described = [line for line in _section(doc, "Options:")
                 if (matched := _OPTION_LINE.match(line)) and matched.group(1) in used]
    if described:
        lines += ["", "Options:", *described]
    return "\n".join(lines)


def _shown(word: str) -> str:
    cut = word[:SHOWN_CHARS] + ("…" if len(word) > SHOWN_CHARS else "")
    return repr(cut)


class Verdict:
    """What `diagnose` found: the message (one line, "" for help), the verb and sub-verb
    whose usage follows (none: the verbs' list), and whether help was asked for."""

    __slots__ = ("help", "message", "subverb", "verb")

    def __init__(self, message: str, verb: str = "", subverb: str = "", *,
                 asked_help: bool = False) -> None:
        self.message = message
        self.verb = verb
        self.subverb = subverb
        self.help = asked_help


def _resolve(name: str, table: dict[str, str]) -> str | None:
    """An option's full name, as docopt takes it: exact, or the one it is a prefix of."""
    if name in table:
        return name
    longer = [option for option in table if option.startswith(name) and name.startswith("--")]
    return longer[0] if len(longer) == 1 else None


# A word left over after `secret set NAME` is a value typed where it must not be.
ON_STANDARD_INPUT = (
    "secret set reads the value from standard input, never from an argument (an argument "
    "is seen by every user of this machine in /proc and kept in shell history): printf %s "
    "VALUE | lnk-sandbox secret set NAME; the words given are not repeated here, and "
    "nothing was stored")


def diagnose(doc: str, words: list[str]) -> Verdict:
    """The first thing wrong with `words` (an argv docopt refused, or one that asks for
    help), against the usage in `doc`."""
    known = verbs(doc)
    if not words:
        return Verdict("no verb given")
    verb = words[0]
    if verb in _HELP:
        return Verdict("", asked_help=True)
    if verb not in known:
        what = "option" if verb.startswith("-") else "verb"
        return Verdict(f"unknown {what} {_shown(verb)}")
    chosen = [form for form in forms(doc) if form.verb == verb]
    secret = verb == "secret"
    rest = words[1:]
    shown = verb
    subverbs = list(dict.fromkeys(form.subverb for form in chosen if form.subverb))
    subverb = ""
    if subverbs:
        if rest[:1] and rest[0] in _HELP:
            return Verdict("", verb, asked_help=True)
        if not rest or rest[0] not in subverbs:
            other = (f" {_shown(rest[0])}" if rest and not rest[0].startswith("-")
                     and not secret else "")
            return Verdict(f"{verb} needs one of {', '.join(subverbs)}"
                           + (f", not{other}" if other else ""), verb)
        subverb = rest[0]
        chosen = [form for form in chosen if form.subverb == subverb]
        rest = rest[1:]
        shown = f"{verb} {subverb}"
    table = options(doc)
    allowed = {name for form in chosen for name in form.options} | set(_HELP)
    commanded = [form for form in chosen if form.command]
    before_command = max((len(form.arguments) for form in commanded), default=0)
    arguments: list[str] = []
    command: list[str] = []
    given: list[str] = []
    flag_before = ""  # the option without a value just before a word, if any
    index = 0
    while index < len(rest):
        word = rest[index]
        if word == "--":
            command = rest[index + 1:]
            break
        if commanded and len(arguments) >= before_command and not word.startswith("-"):
            command = rest[index:]
            later = next((other for other in command[1:] if other.startswith("-")), None)
            if later is not None:
                return Verdict(f"missing `--` before the command: {_shown(later)} is read as "
                               f"an option of {PROGRAM} {shown}; put -- before "
                               f"{_shown(command[0])}", verb, subverb)
            break
        if word.startswith("-") and word != "-":
            long = word.startswith("--")
            name, equals, _ = word.partition("=") if long else (word[:2], "", "")
            resolved = _resolve(name, table)
            if resolved is None and secret:
                return Verdict(ON_STANDARD_INPUT if subverb == "set" else
                               "unknown option (not repeated here)", verb, subverb)
            if resolved is None:
                return Verdict(f"unknown option {_shown(name)}", verb, subverb)
            if resolved in _HELP:
                return Verdict("", verb, asked_help=True)
            if resolved not in allowed:
                return Verdict(f"{resolved} is not an option of {PROGRAM} {shown}", verb,
                               subverb)
            value_name = table[resolved]
            if value_name:
                inline = equals if long else word[2:]
                if not inline:
                    if index + 1 == len(rest):
                        return Verdict(f"{resolved} needs a value ({resolved} {value_name})",
                                       verb, subverb)
                    index += 1
                flag_before = ""
            else:
                if equals or (not long and len(word) > 2):
                    return Verdict(f"{resolved} takes no value", verb, subverb)
                flag_before = resolved
            given.append(resolved)
        else:
            if secret and subverb == "set" and arguments:
                return Verdict(ON_STANDARD_INPUT, verb, subverb)
            expected = max((len(form.arguments) for form in chosen), default=0)
            if len(arguments) >= expected and not commanded:
                what = "a word" if secret else _shown(word)
                where = f" ({flag_before} takes no value)" if flag_before else ""
                return Verdict(f"unexpected {what}{where}", verb, subverb)
            arguments.append(word)
            flag_before = ""
        index += 1
    if command and not commanded:
        if secret and subverb == "set":
            return Verdict(ON_STANDARD_INPUT, verb, subverb)
        return Verdict(f"{PROGRAM} {shown} runs no command: unexpected words after --",
                       verb, subverb)
    if commanded and len(arguments) < before_command:
        return Verdict(f"missing {commanded[0].arguments[len(arguments)]}", verb, subverb)
    for name in sorted(set.intersection(*(set(form.required) for form in chosen)),
                       key=lambda option: chosen[0].line.index(option)):
        if name not in given:
            return Verdict(f"{shown} needs {name} {table.get(name, '')}".rstrip(),
                           verb, subverb)
    others = {name for form in chosen if not form.command for name in form.options}
    if commanded and not command and not (others & set(given)) - set(commanded[0].options):
        return Verdict(f"no command given: {PROGRAM} {shown} runs the command after --",
                       verb, subverb)
    needed = min((len(form.arguments) - form.optional_arguments for form in chosen),
                 default=0)
    if len(arguments) < needed:
        return Verdict(f"missing {chosen[0].arguments[len(arguments)]}", verb, subverb)
    if len(set(given)) < len(given):
        twice = next(name for name in given if given.count(name) > 1)
        return Verdict(f"{twice} is given twice", verb, subverb)
    if len(given) > 1:
        return Verdict(f"{', '.join(given)} do not go together in {PROGRAM} {shown}", verb,
                       subverb)
    return Verdict(f"these words make no {PROGRAM} {shown} command", verb, subverb)
