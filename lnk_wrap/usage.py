"""What was wrong with a command line, in one line, and the command's own usage (sans IO).

Job: docopt says only that the words did not fit (and, for words left over, its own
`Warning: found unmatched (duplicate?) arguments [Argument(None, …)]`), then the whole
usage. So when docopt refuses an argv, `diagnose` reads the same usage text (lnk_wrap.cli's
docstring, the one place the commands are written) and names the first thing wrong: an
unknown command, an unknown option or one of another command, a value where none goes or
none where one must, a missing `--` before a program to run that has options of its own,
a missing program, option or argument, a word too many. `command_help` is `lnk-sandbox
NAME --help`: that command's usage, its paragraph and its options.

Words: a "command" here is one of lnk-sandbox's (`wrap`, `secret set`: a command and its
subcommand); the "program" is what a command such as `run` starts (`-- CMD ARG…`). What
the person reads keeps its words: `--help`'s "Verbs:" section, "no verb given",
"unknown verb", and "command" for the program in "missing `--` before the command".

Trust: the words are the person's; what is repeated of them is a command or an option's
name, or a word cut to SHOWN_CHARS and escaped, never an option's value, and never a
word of `secret` (a value typed where it must not be is a secret).
"""

from __future__ import annotations

import re

__all__ = ["ON_STANDARD_INPUT", "SHOWN_CHARS", "Form", "Verdict", "command_help", "commands",
           "diagnose", "forms", "options", "usage_of"]

# A word repeated in a message is cut here: enough to recognise it.
SHOWN_CHARS = 40
PROGRAM = "lnk-sandbox"
_HELP = ("-h", "--help")
_OPTION_LINE = re.compile(r"^\s+(-{1,2}[A-Za-z][\w-]*)(?:[= ]([A-Z][A-Z_]*))?(?:\s{2,}|$)")


class Form:
    """One usage line: its command, its subcommand (`secret set`), its arguments before any
    program, whether it takes a program to run, its options, and those it cannot go
    without."""

    __slots__ = ("arguments", "command", "line", "optional_arguments", "options",
                 "required", "subcommand", "takes_program")

    def __init__(self, line: str) -> None:
        self.line = line
        tokens = re.sub(r"([()\[\]|])", r" \1 ", line).split()[1:]
        self.command = tokens[0]
        self.subcommand = ""
        self.arguments: list[str] = []
        self.optional_arguments = 0
        self.takes_program = False
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
                self.takes_program = True
            elif token.islower() and index == 1:
                self.subcommand = token
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


def commands(doc: str) -> list[str]:
    return list(dict.fromkeys(form.command for form in forms(doc)))


def usage_of(doc: str, command: str, subcommand: str = "") -> list[str]:
    """The command's usage lines (a subcommand's alone when it is known)."""
    return [form.line for form in forms(doc)
            if form.command == command
            and (not subcommand or form.subcommand == subcommand)]


def command_help(doc: str, command: str) -> str:
    """`lnk-sandbox NAME --help`: its usage, its paragraph of the usage text's commands
    (headed "Verbs:", user-visible), its options."""
    lines = ["Usage:", *(f"  {line}" for line in usage_of(doc, command)), ""]
    paragraph: list[str] = []
    for line in _section(doc, "Verbs:"):
        head = line[2:].split(" ", 1)[0] if line.startswith("  ") and line[2:3] != " " else ""
        if head:
            if paragraph:
                break
            if head == command:
                paragraph.append(line)
        elif paragraph:
            paragraph.append(line)
    lines += paragraph
    used = {name for form in forms(doc) if form.command == command for name in form.options}
    described = [line for line in _section(doc, "Options:")
                 if (matched := _OPTION_LINE.match(line)) and matched.group(1) in used]
    if described:
        lines += ["", "Options:", *described]
    return "\n".join(lines)


def _shown(word: str) -> str:
    cut = word[:SHOWN_CHARS] + ("…" if len(word) > SHOWN_CHARS else "")
    return repr(cut)


class Verdict:
    """What `diagnose` found: the message (one line, "" for help), the command and
    subcommand whose usage follows (none: the commands' list), and whether help was asked
    for."""

    __slots__ = ("command", "help", "message", "subcommand")

    def __init__(self, message: str, command: str = "", subcommand: str = "", *,
                 asked_help: bool = False) -> None:
        self.message = message
        self.command = command
        self.subcommand = subcommand
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
    help), against the usage in `doc`: the command, its subcommand, each word after them,
    then what is missing or too much once all are read."""
    known = commands(doc)
    if not words:
        return Verdict("no verb given")
    command = words[0]
    if command in _HELP:
        return Verdict("", asked_help=True)
    if command not in known:
        what = "option" if command.startswith("-") else "verb"  # the person's word
        return Verdict(f"unknown {what} {_shown(command)}")
    chosen = [form for form in forms(doc) if form.command == command]
    found = _subcommand(command, chosen, words[1:])
    if isinstance(found, Verdict):
        return found
    subcommand, rest = found
    reading = _Reading(doc, command, subcommand,
                       [form for form in chosen
                        if not subcommand or form.subcommand == subcommand])
    return _read_words(reading, rest) or _after_words(reading)


def _subcommand(command: str, chosen: list[Form],
                rest: list[str]) -> Verdict | tuple[str, list[str]]:
    """The subcommand the words name (`secret set`), "" for a command without, and the
    words after it; or what is wrong (never repeating a word of `secret`)."""
    subcommands = list(dict.fromkeys(form.subcommand for form in chosen if form.subcommand))
    if not subcommands:
        return "", rest
    if rest[:1] and rest[0] in _HELP:
        return Verdict("", command, asked_help=True)
    if not rest or rest[0] not in subcommands:
        other = (f" {_shown(rest[0])}" if rest and not rest[0].startswith("-")
                 and command != "secret" else "")
        return Verdict(f"{command} needs one of {', '.join(subcommands)}"
                       + (f", not{other}" if other else ""), command)
    return rest[0], rest[1:]


class _Reading:
    """What `diagnose` knows while it reads the words after the command: the forms the
    command (and subcommand) may take, and the arguments, program and options read so
    far."""

    __slots__ = ("allowed", "arguments", "before_program", "chosen", "command", "flag_before",
                 "given", "program", "secret", "shown", "subcommand", "table", "with_program")

    def __init__(self, doc: str, command: str, subcommand: str, chosen: list[Form]) -> None:
        self.command = command
        self.subcommand = subcommand
        self.chosen = chosen
        self.secret = command == "secret"
        self.shown = f"{command} {subcommand}" if subcommand else command
        self.table = options(doc)
        self.allowed = {name for form in chosen for name in form.options} | set(_HELP)
        self.with_program = [form for form in chosen if form.takes_program]
        self.before_program = max((len(form.arguments) for form in self.with_program),
                                  default=0)
        self.arguments: list[str] = []
        self.program: list[str] = []
        self.given: list[str] = []
        self.flag_before = ""  # the option without a value just before a word, if any

    def verdict(self, message: str) -> Verdict:
        return Verdict(message, self.command, self.subcommand)


def _read_words(reading: _Reading, rest: list[str]) -> Verdict | None:
    """Each word in turn, up to the program: None when all of them fit."""
    index = 0
    while index < len(rest):
        word = rest[index]
        if word == "--":
            reading.program = rest[index + 1:]
            return None
        if (reading.with_program and len(reading.arguments) >= reading.before_program
                and not word.startswith("-")):
            reading.program = rest[index:]
            return _option_in_program(reading)
        if word.startswith("-") and word != "-":
            used = _read_option(reading, word, has_next=index + 1 < len(rest))
            if isinstance(used, Verdict):
                return used
            index += used
        else:
            found = _read_argument(reading, word)
            if found is not None:
                return found
            index += 1
    return None


def _option_in_program(reading: _Reading) -> Verdict | None:
    """A program without `--` before it whose words include an option: docopt read that
    as one of ours."""
    program = reading.program
    later = next((other for other in program[1:] if other.startswith("-")), None)
    if later is None:
        return None
    return reading.verdict(f"missing `--` before the command: {_shown(later)} is read as "
                           f"an option of {PROGRAM} {reading.shown}; put -- before "
                           f"{_shown(program[0])}")


def _read_option(reading: _Reading, word: str, *, has_next: bool) -> Verdict | int:
    """An option: what is wrong with it, or how many words it takes (2: its value is
    the next word)."""
    long = word.startswith("--")
    name, equals, _ = word.partition("=") if long else (word[:2], "", "")
    resolved = _resolve(name, reading.table)
    if resolved is None and reading.secret:
        return reading.verdict(ON_STANDARD_INPUT if reading.subcommand == "set" else
                               "unknown option (not repeated here)")
    if resolved is None:
        return reading.verdict(f"unknown option {_shown(name)}")
    if resolved in _HELP:
        return Verdict("", reading.command, asked_help=True)
    if resolved not in reading.allowed:
        return reading.verdict(f"{resolved} is not an option of {PROGRAM} {reading.shown}")
    used = 1
    value_name = reading.table[resolved]
    if value_name:
        inline = equals if long else word[2:]
        if not inline:
            if not has_next:
                return reading.verdict(f"{resolved} needs a value ({resolved} {value_name})")
            used = 2
        reading.flag_before = ""
    else:
        if equals or (not long and len(word) > 2):
            return reading.verdict(f"{resolved} takes no value")
        reading.flag_before = resolved
    reading.given.append(resolved)
    return used


def _read_argument(reading: _Reading, word: str) -> Verdict | None:
    """A word that is no option, before any program: one of the command's arguments, or a
    word too many (a word of `secret set` past its NAME is a value typed there)."""
    if reading.secret and reading.subcommand == "set" and reading.arguments:
        return reading.verdict(ON_STANDARD_INPUT)
    expected = max((len(form.arguments) for form in reading.chosen), default=0)
    if len(reading.arguments) >= expected and not reading.with_program:
        what = "a word" if reading.secret else _shown(word)
        where = f" ({reading.flag_before} takes no value)" if reading.flag_before else ""
        return reading.verdict(f"unexpected {what}{where}")
    reading.arguments.append(word)
    reading.flag_before = ""
    return None


def _after_words(reading: _Reading) -> Verdict:
    """Every word fitted on its own: what is missing or too much among them."""
    chosen, with_program, shown = reading.chosen, reading.with_program, reading.shown
    arguments, given, table = reading.arguments, reading.given, reading.table
    if reading.program and not with_program:
        if reading.secret and reading.subcommand == "set":
            return reading.verdict(ON_STANDARD_INPUT)
        return reading.verdict(f"{PROGRAM} {shown} runs no command: unexpected words "
                               "after --")
    if with_program and len(arguments) < reading.before_program:
        return reading.verdict(f"missing {with_program[0].arguments[len(arguments)]}")
    for name in sorted(set.intersection(*(set(form.required) for form in chosen)),
                       key=lambda option: chosen[0].line.index(option)):
        if name not in given:
            return reading.verdict(f"{shown} needs {name} {table.get(name, '')}".rstrip())
    others = {name for form in chosen if not form.takes_program for name in form.options}
    if (with_program and not reading.program
            and not (others & set(given)) - set(with_program[0].options)):
        return reading.verdict(f"no command given: {PROGRAM} {shown} runs the command "
                               "after --")
    needed = min((len(form.arguments) - form.optional_arguments for form in chosen),
                 default=0)
    if len(arguments) < needed:
        return reading.verdict(f"missing {chosen[0].arguments[len(arguments)]}")
    if len(set(given)) < len(given):
        twice = next(name for name in given if given.count(name) > 1)
        return reading.verdict(f"{twice} is given twice")
    if len(given) > 1:
        return reading.verdict(f"{', '.join(given)} do not go together in {PROGRAM} {shown}")
    return reading.verdict(f"these words make no {PROGRAM} {shown} command")
