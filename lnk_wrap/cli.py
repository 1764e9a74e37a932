"""lnk-sandbox: the verbs a person, a harness or a script uses.

Usage:
  lnk-sandbox wrap --spec=FILE [--wire=NAME] [--platform=NAME] [--json] [--] COMMAND...
  lnk-sandbox run --spec=FILE [--wire=NAME] [--platform=NAME] [--summary=FILE] [--] COMMAND...
  lnk-sandbox learn --spec=FILE [--platform=NAME] [--] COMMAND...
  lnk-sandbox check [--spec=FILE] [--platform=NAME] [--json]
  lnk-sandbox check --probe [--json]
  lnk-sandbox explain --spec=FILE [--json]
  lnk-sandbox status [--json | --watch]
  lnk-sandbox log [WIRE] [--follow] [--json] [--since=TIME] [-n N] [--refused]
  lnk-sandbox stop [--clear]
  lnk-sandbox on-stop [--name=NAME] [--] COMMAND...
  lnk-sandbox on-stop (--list | --remove=NAME)
  lnk-sandbox paused [--json]
  lnk-sandbox resume WIRE
  lnk-sandbox allow [--tcp] WIRE HOST
  lnk-sandbox disallow [--tcp] WIRE (HOST | --clear)
  lnk-sandbox allowed WIRE [--json]
  lnk-sandbox secret set NAME [--rule=FILE]
  lnk-sandbox secret list [--json]
  lnk-sandbox secret remove NAME
  lnk-sandbox tool add NAME [--allow=TOOL]... [--ask=MODE] [--secret=VAR]...
                       [--env=NAME_VALUE]... [--home=DIR] [--cwd=DIR] [--] COMMAND...
  lnk-sandbox tool list [--json]
  lnk-sandbox tool remove NAME
  lnk-sandbox guest add NAME --spec=FILE --key=PUBKEY_FILE
  lnk-sandbox guest list [--json]
  lnk-sandbox guest remove NAME
  lnk-sandbox enter NAME [--settings=DIR]
  lnk-sandbox asks [--json] [--show=ID | --wait [--timeout=SECONDS]]
  lnk-sandbox answer ID ANSWER
  lnk-sandbox url [--agent=NAME | --spec=FILE] [--platform=NAME] [--json]
  lnk-sandbox mcp-remote URL [HEADER_OPTION...]
  lnk-sandbox (-h | --help)
  lnk-sandbox --version

Verbs:
  wrap    Print the one command line that runs COMMAND sandboxed later, shell-quoted
          (or a JSON array with --json). It needs no process of ours and no open file
          to run: keep it and run it from anywhere. With --platform macos, the
          macOS line (/usr/bin/sandbox-exec -p PROFILE -D… -- …), printed on any
          machine; it has never run on a Mac. Its network is the agent's proxy on
          the agent's port, which the line does not start (what runs inside
          Seatbelt cannot be the proxy): run it under `run --platform macos`, or
          with that proxy kept running; stderr says so.
  run     Run COMMAND sandboxed now: the same line, run at once. With --summary, FILE
          gets one JSON object when it has ended, for a script: {"status", "wire",
          "run", "calls", "refused", "paused", "pause_reason", "stopped",
          "other_runs"} (a file, not stderr: the command's own output stays its own).
          With --platform macos, the macOS line run with its parent outside it (the
          agent's proxy on its port, the log reader, signals): on a Mac only; it has
          never run on one.
  learn   Run COMMAND once under the spec's other grants with every program open, and
          print the [commands] list that lets it run: what the spec lists, and what
          ran besides (never a program in a folder the sandbox writes or a temp
          folder; interpreters marked). Then the [network] hosts the run was refused
          by name, from its wire's log (names sharing a domain as `*.domain`, marked;
          a model provider's API host never: use [verbs] model), and names it looked
          up for [tcp] endpoints. Writes nothing.
  log     A wire's log (every wire's without WIRE): each call allowed, ended or
          refused, as host and port only, and a line where each run starts and exits
          (its status); with --follow, new lines as they come; with --since, the lines
          from TIME on (10m, 2h, 1d ago, or an ISO time: 2026-05-01T09:30, local unless
          it says Z or +HH:MM); with -n, the last N of each wire; with --refused, only
          refusals and pauses. A call the kill switch or a pause closed says so in its
          `ended` line (closed=kill-switch, closed=pause).
  stop    The kill switch: every proxy refuses every call and closes the open ones
          (within a second), then each command registered with on-stop runs once;
          with --clear, it lifts the switch.
  on-stop Register COMMAND for stop to run (e.g. `lnk agent stop NAME`); --list shows
          what is registered, --remove takes one off.
  paused  Every paused wire, why and since when (--json for `lnk agent status`).
  resume  Lift the pause of WIRE.
  allow   Let the running wire WIRE reach HOST too (`name`, `name:port` or `*.domain`,
          as in [network] hosts; no port: 80 and 443), taken by its proxy at the next
          call with every check a listed host gets, and kept for the wire's later
          starts. Not `*`, an address of this machine, nor a provider's API host (name
          the provider in [verbs] model). The refused call's line on the wire's log
          says the very command. One `changed` line on the wire's log. With --tcp, HOST
          is an endpoint (`name:port`, `*.domain:port`, as in [tcp] endpoints), taken
          at the name's next lookup by a running sandbox (one that started without DNS
          of its own, a spec with no [tcp] endpoint nor [lan] host by name, is given
          its DNS first, within a second).
  disallow  Take HOST away from WIRE's additions (--clear: all of them): refused from
          the next call, and its open calls closed within a second.
  allowed WIRE's additions: host, when, by whom (--json: {"wire", "hosts": [{"host",
          "added", "by"}], "endpoints": […]}), apart from its spec's own hosts.
  secret  The store of secrets in Link's settings (hidden in every sandbox): `set`
          reads the value of NAME from standard input (never an argument; one
          trailing newline is taken off) and keeps it in a file only you can read;
          `list` prints the names only, never a value; `remove` deletes one (and its
          rule). NAME is letters, digits, '-' and '_'. The model verb's keys are the
          secrets named anthropic, openai, gemini and openrouter. With --rule, the
          secret is kept with the rule FILE (JSON, from the plugin that owns the
          service) that the secret verb enforces; a rule too weak to hold is refused,
          naming the field, and nothing is stored.
  tool    Tools that run outside: stdio MCP servers a spec may name ([verbs] tools),
          reached from inside through the MCP verb and started, outside, on first
          use. `add` defines NAME as COMMAND (kept in Link's settings, hidden in every
          sandbox); every tools/call asks you first unless the MCP tool is named
          by --allow, or --ask none. The tool runs with the environment fixed at `add`:
          PATH and the locale as they are then, HOME your passwd entry's (or --home),
          its cwd its HOME (or --cwd), and NAME=VALUE for each --env; never a
          session's. Each --secret VAR is read from standard input (a prompt each on a
          terminal, else one line each, in the order given) and given to the tool in
          its environment; `${VAR}` in COMMAND may name only those. For
          lnk-sandbox-mcp-remote, its URL is checked at once, and a literal header
          value is kept as a secret, out of its command. Every secret a tool names
          is taken out of every sandbox's environment. `list` shows the names (--json:
          with what each allows and its secrets' names), `remove` deletes one.
  guest   Guests over SSH: a person with a key of their own works only in a sandbox of
          their own, as you. `add` reads the spec FILE as run does, shows what it opens,
          asks you, keeps it (guests.toml in Link's settings, every path absolute) and
          writes `restrict,pty,command="… enter NAME"` and the key PUBKEY_FILE into your
          ~/.ssh/authorized_keys (a key a line there already lets in is refused); `list`
          (--json) shows them; `remove` takes the guest's line out, nothing else.
  enter   What sshd runs for a guest (the forced command): the login shell, the command
          (SSH_ORIGINAL_COMMAND), scp or sftp, in the guest's sandbox (its wire is
          guest-NAME), with the SSH session's terminal.
  asks    The questions that wait for your answer (a tool call a sandbox made, …):
          id, wire, since when, the question in plain ASCII, what a yes allows; --json:
          {"asks": [{"id", "wire", "title", "question", "allows", "since"}]}; and
          with --show=ID, that question whole (up to 64 Ki characters); with --wait,
          waits until one is there, then shows it (exit 1 after --timeout with none).
  answer  Answer the question ID (from asks) yes or no. The first answer a question
          gets stands (a dialog, the terminal, or this); two minutes without one is no.
  url     The verbs' URLs for a harness's configuration before its first start, as
          NAME=VALUE lines (--json: an object): an agent's $LNK_SANDBOX_URL (its URL
          secret, made once and kept in Link's settings, as its first run would) and
          each model provider's base URL (with the agent's key placeholder); --spec:
          its [agent]'s, and only the providers its [verbs] model names. For the
          platform macos: at the agent's own port on the Mac's loopback (main's 40781).
  mcp-remote  A stdio MCP server that relays to the remote MCP server at URL (a tool's
          command, run outside: `tool add far -- lnk-sandbox mcp-remote URL --header
          'Authorization: Bearer ${FAR_TOKEN}'`); the same as lnk-sandbox-mcp-remote.
  explain What the spec FILE opens, in plain words, grouped: what it reads, writes
          and hides (the dot files held at the top of each written folder among
          them), which programs may start, every way out by verb, the wire's controls,
          and what every sandbox closes. The words `guest add` asks with, and a spec's
          first run with write_dot_files shows. Runs nothing, writes nothing.
  status  Every wire at a glance: each running sandbox's name and command, calls and
          refusals in the last minute, open calls, paused or not and why, the kill
          switch, questions waiting; from Link's settings only. --watch: the same,
          refreshed in place every second in a terminal; --json for `lnk agent status`
          (its keys: docs/components/lnk_wrap.md).
  check   What this machine gives (bubblewrap, user namespaces, Landlock, seccomp) and
          which protections are therefore in force; the stated gaps, as open; which
          providers' keys are set. With --spec: which model verbs the spec turns on,
          which has no key yet, and whether server-side tools are kept. With --probe:
          escape attempts from a real sandbox here (files outside its grants and links
          to them, a hidden folder, Link's settings, held dot files, an unlisted
          program, execveat, a memory file, refused system calls, capabilities, unix
          sockets outside, this machine and metadata through the proxy, a refused
          host, refused socket families), each held or OPEN, with what this machine
          lacks; exit 0 only when every one held (1: one is open). For the platform
          macos: what the Seatbelt profile puts in force on a Mac, and what stays
          open there, and whether the spec has a macOS profile (exit 0 only on a Mac
          whose sandbox-exec takes the profile).

Options:
  --spec=FILE   The spec (TOML) that says what the sandbox may touch.
  --wire=NAME   Name the sandbox's wire (its log and pause); default: the spec's name.
  --platform=NAME  linux (this machine's sandbox, the default) or macos (wrap, run, check).
  --json        Machine-readable output.
  --follow      Keep showing lines as they come (log).
  --since=TIME  Only lines from TIME on (log): 30s, 10m, 2h, 1d ago, or an ISO time.
  -n N          The last N lines of each wire (log).
  --refused     Only the refusals, and pauses (log).
  --summary=FILE  Write the run's summary there, as JSON, when it has ended (run).
  --wait        Wait until a question is there (asks).
  --watch       Refresh in place every second until interrupted (status).
  --timeout=SECONDS  How long --wait waits (asks); default: for ever.
  --agent=NAME  The agent whose URLs are shown (url).
  --clear       Lift the kill switch (stop); take every addition away (disallow).
  --probe       Run the escape attempts in a real sandbox (check).
  --tcp         HOST is an endpoint of [tcp] endpoints (allow, disallow).
  --name=NAME   The registration's name (on-stop); default: a random one.
  --list        What is registered (on-stop).
  --remove=NAME  Take a registration off (on-stop).
  --rule=FILE   The rule kept with a secret (secret set): where it may go, and how.
  --allow=TOOL  An MCP tool of the tool that runs without asking (tool add; repeat it).
  --ask=MODE    each (the default: every other tools/call asks you) or none (tool add).
  --secret=VAR  A secret of the tool (tool add; repeat it): its value on standard input.
  --env=NAME_VALUE  NAME=VALUE in the tool's environment (tool add; repeat it; not a secret).
  --home=DIR    The tool's HOME (tool add); default: yours, from the passwd entry.
  --cwd=DIR     The tool's working folder (tool add); default: its HOME.
  --key=PUBKEY_FILE  The guest's public key (guest add): one line, TYPE BASE64 [COMMENT].
  --settings=DIR  Link's settings folder (enter: sshd's environment is not yours).
  --show=ID     The waiting question ID, whole (asks).

`lnk sandbox VERB …` is the same as `lnk-sandbox VERB …`; `lnk-sandbox VERB --help`
shows that verb alone. A usage mistake is one line saying what was wrong, then the verb's
usage, exit 2.
Exit status: COMMAND's own; 128+N if it died of signal N; 125 when the sandbox could
not be made (a bad spec, no bubblewrap, no user namespaces); 126 when COMMAND cannot be
run; 127 when it is not found.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from lnk_common.policy import Policy
    from lnk_wrap.learn_network import Seen

    _Handler = Callable[[Mapping[str, object], Mapping[str, str], list[str]], int]

__all__ = ["VERSION", "enter_arguments", "main", "run_arguments"]

EXIT_SANDBOX_FAILED = 125
EXIT_USAGE = 2
VERSION = "lnk-sandbox 0.1.0"


class CliError(Exception):
    """A command cannot do what was asked; one line, exit 125."""


def _policy(arguments: Mapping[str, object], env: Mapping[str, str]) -> Policy:
    from lnk_wrap.spec import SpecError, is_name, load_spec

    try:
        policy = load_spec(str(arguments["--spec"]), env)
    except SpecError as error:
        raise CliError(f"{error}; nothing was run") from None
    wire = arguments.get("--wire")
    if isinstance(wire, str):
        if not is_name(wire):
            raise CliError(f"--wire {wire!r}: use letters, digits, '.', '_' and '-'")
        policy = policy.with_name(wire)
    if policy.has_wire():  # the proxy and the relay both import h11 and orjson
        policy = policy.with_site_packages(_site_packages())
    return policy


def _site_packages() -> str:
    """Where h11 (and dnslib beside it) is installed: the proxy runs isolated (-I -S)
    and is told. Looked up on sys.path as the import system would find the package
    (importlib.util costs a start 2 ms)."""
    for folder in sys.path:
        origin = os.path.join(folder or ".", "h11", "__init__.py")
        if os.path.isfile(origin):
            return os.path.dirname(os.path.dirname(os.path.realpath(origin)))
    raise CliError("h11 is not installed: the proxy needs it (bin/setup installs it)")


def _open_summary(path: str) -> int:
    """The summary's file, opened before the sandbox exists (never through a link, and
    a regular file only): a sandbox that writes its folder cannot make the name lead
    elsewhere by the time the run ends. Written whole when the run has ended."""
    try:
        # O_NONBLOCK: a FIFO there is refused below, not waited on.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise CliError(f"--summary {path}: {error.strerror}; nothing was run") from None
    if os.fstat(fd).st_mode & 0o170000 != 0o100000:  # a regular file
        os.close(fd)
        raise CliError(f"--summary {path}: not a regular file; nothing was run")
    os.ftruncate(fd, 0)  # a run that fails to start leaves its summary, not an old one
    return fd


def _write_summary(fd: int, found: Mapping[str, object]) -> None:
    import orjson

    data = orjson.dumps(found) + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def wrap_line(policy: Policy, command: list[str]) -> list[str]:
    """The line a harness keeps: the launcher with the policy, through the shell's check
    that what it names is still there (lnk_wrap.helpers.kept_line)."""
    from lnk_wrap.helpers import kept_line

    return kept_line([*policy.to_argv(), "--", *command])


# What docopt gives `run` for the options it does not take: with run_arguments, the
# whole of docopt's answer (tests/test_cli.py holds the two equal on generated argv).
_RUN_DEFAULTS: dict[str, object] = {
    "wrap": False, "run": True, "learn": False, "check": False, "log": False,
    "explain": False, "status": False, "--watch": False,
    "stop": False, "on-stop": False, "paused": False, "resume": False,
    "allow": False, "disallow": False, "allowed": False, "HOST": None, "--tcp": False,
    "secret": False, "set": False, "list": False, "remove": False, "NAME": None,
    "--rule": None, "tool": False, "add": False, "--allow": [], "--ask": None,
    "--secret": [], "--env": [], "--home": None, "--cwd": None,
    "asks": False, "answer": False, "ID": None, "ANSWER": None, "--show": None,
    "guest": False, "enter": False, "--key": None, "--settings": None,
    "--spec": None, "--wire": None, "--platform": None, "--json": False, "--follow": False,
    "--clear": False,
    "--since": None, "-n": None, "--refused": False, "--summary": None, "--wait": False,
    "--timeout": None, "url": False, "--agent": None, "mcp-remote": False, "URL": None,
    "HEADER_OPTION": [],
    "--name": None, "--list": False, "--remove": None, "--probe": False, "-h": False,
    "--help": False,
    "--version": False, "--": False, "WIRE": None, "COMMAND": [],
}
_RUN_OPTIONS = ("--spec", "--wire", "--summary")


def run_arguments(words: list[str]) -> dict[str, object] | None:
    """docopt's answer for the common shape of `run` (the command, --spec and --wire,
    each once, by their full names, then the command, after `--` or starting with no
    `-`; --summary too), read without docopt: importing and running it costs every start 8 ms. Any
    other argv (an error, help, an abbreviation) is None: docopt reads it, and says what
    is wrong, from the usage text above, the one place the commands are written."""
    if words[:1] != ["run"]:
        return None
    found = dict(_RUN_DEFAULTS)
    index = 1
    while index < len(words):
        word = words[index]
        name, equals, value = word.partition("=")
        if name not in _RUN_OPTIONS or found[name] is not None:
            break
        if not equals:
            if index + 1 == len(words):
                return None
            index += 1
            value = words[index]
        if not value or value.startswith("-"):
            return None
        found[name] = value
        index += 1
    if found["--spec"] is None or index == len(words):
        return None
    command = words[index:]
    if command[0] == "--":
        found["--"] = True
        command = command[1:]
    elif any(word.startswith("-") for word in command):
        return None
    if not command:
        return None
    found["COMMAND"] = command
    return found


def enter_arguments(words: list[str]) -> dict[str, object] | None:
    """docopt's answer for the forced command of a guest's line (`enter NAME
    --settings=DIR`, or `--settings DIR`, or no option), read without docopt: sshd runs
    it at every session, and docopt's import is some 12 ms of each. Anything else is
    None, for docopt, as for run_arguments."""
    if words[:1] != ["enter"] or len(words) not in (2, 3, 4):
        return None
    name, options = words[1], words[2:]
    if name.startswith("-") or not name:
        return None
    settings: str | None = None
    if len(options) == 1 and options[0].startswith("--settings="):
        settings = options[0][len("--settings="):]
    elif len(options) == 2 and options[0] == "--settings":
        settings = options[1]
    elif options:
        return None
    if settings is not None and (not settings or settings.startswith("-")):
        return None
    found = dict(_RUN_DEFAULTS)
    found.update({"run": False, "enter": True, "NAME": name, "--settings": settings})
    return found


def main(argv: list[str] | None = None) -> None:
    arguments_list = sys.argv[1:] if argv is None else list(argv)
    if arguments_list[:1] == ["sandbox"]:
        arguments_list = arguments_list[1:]
    arguments: Mapping[str, object] | None = (run_arguments(arguments_list)
                                              or enter_arguments(arguments_list))
    if arguments is None:
        if arguments_list[:1] == ["mcp-remote"]:  # its own argv, read by its own parser
            from lnk_mcpremote.main import main as mcp_remote

            mcp_remote(arguments_list[1:])
        arguments = _parsed(arguments_list)
    env = os.environ
    try:
        code = _dispatch(arguments, env)
    except CliError as error:
        print(f"lnk-sandbox: {error}", file=sys.stderr)
        code = EXIT_SANDBOX_FAILED
    sys.exit(code)


def _parsed(words: list[str]) -> Mapping[str, object]:
    """docopt's reading of `words`; a usage mistake is one line saying what was wrong,
    then that command's usage alone, exit 2 (lnk_wrap.usage); `lnk-sandbox NAME --help`
    that command's."""
    from lnk_wrap import usage

    if any(word in ("-h", "--help") for word in words):
        asked = usage.diagnose(__doc__ or "", words)
        if asked.help:
            print(usage.command_help(__doc__ or "", asked.command) if asked.command
                  else __doc__)
            sys.exit(0)
    from docopt import DocoptExit, docopt

    try:
        return dict(docopt(__doc__, argv=words, default_help=False,
                           version=VERSION))
    except DocoptExit:
        pass
    found = usage.diagnose(__doc__ or "", words)
    print(f"lnk-sandbox: {found.message}", file=sys.stderr)
    if found.command:
        lines = usage.usage_of(__doc__ or "", found.command, found.subcommand)
        for index, line in enumerate(lines):
            print(f"{'usage:' if index == 0 else '      '} {line}", file=sys.stderr)
        print(f"(lnk-sandbox {found.command} --help says more)", file=sys.stderr)
    else:
        print(f"the verbs: {', '.join(usage.commands(__doc__ or ''))} "
              "(lnk-sandbox --help says more)", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def _dispatch(arguments: Mapping[str, object], env: Mapping[str, str]) -> int:
    """Do the command docopt (or run_arguments) found, by its handler in _COMMANDS; a
    command that is in no row is a usage mistake."""
    raw_program = arguments["COMMAND"]
    program = [str(word) for word in raw_program] if isinstance(raw_program, list) else []
    for name, handler in _COMMANDS.items():
        if arguments[name]:
            return handler(arguments, env, program)
    return EXIT_USAGE


def _settings_root(env: Mapping[str, str]) -> str:
    """Link's settings folder, or CliError saying why there is none."""
    from lnk_common.settings import SettingsError, settings_folder

    try:
        return settings_folder(env).root
    except SettingsError as error:
        raise CliError(str(error)) from None


def _platform(arguments: Mapping[str, object]) -> str:
    given = arguments.get("--platform")
    if given is None:
        return "linux"  # PLATFORMS[0], without the macOS modules' imports on run's path
    from lnk_wrap.seatbelt_wrap import PLATFORMS

    if given not in PLATFORMS:
        raise CliError(f"--platform {given!r}: one of {', '.join(PLATFORMS)}")
    return str(given)


def _mac_line(arguments: Mapping[str, object], env: Mapping[str, str],
              command: list[str]) -> tuple[list[str], int | None]:
    """wrap --platform macos (lnk_wrap.seatbelt_wrap): the agent's folder made as its
    first start would, then the spec read as on Linux, then the macOS line and the
    agent's proxy port it needs (None: no network through a proxy)."""
    from lnk_wrap.seatbelt import MacosError
    from lnk_wrap.seatbelt_ports import PortsError
    from lnk_wrap.seatbelt_wrap import mac_parts, make_agent_folder

    make_agent_folder(str(arguments["--spec"]), _settings_root(env))
    policy = _policy(arguments, env)
    try:
        return mac_parts(policy, command)
    except (MacosError, PortsError) as error:
        raise CliError(f"{policy.spec}: macOS: {error}; nothing was printed") from None
    except OSError as error:
        raise CliError(f"the macOS ports' table: {error.strerror}; nothing was printed"
                       ) from None


def _mac_proxy_note(port: int) -> str:
    from lnk_wrap.seatbelt_wrap import PROXY_NOTE

    return PROXY_NOTE.format(port=port)


def _wrap(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    port: int | None = None
    if _platform(arguments) == "macos":
        line, port = _mac_line(arguments, env, command)
    else:
        policy = _policy(arguments, env)
        if policy.network == "proxy":  # and the line says it again at each of its starts
            from lnk_wrap.allow_view import start_note

            note = start_note(policy.settings, policy.name)
            if note:
                print(f"lnk-sandbox: {note}", file=sys.stderr)
        line = wrap_line(policy, command)
    if arguments["--json"]:
        import orjson

        sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
    else:
        import shlex

        print(shlex.join(line))
    if port is not None:  # after the line, so that the line is what output begins with
        sys.stdout.flush()
        print(f"lnk-sandbox: {_mac_proxy_note(port)}", file=sys.stderr)
    return 0


def _run(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    from lnk_wrap.launch import LaunchError, launch, record_signals

    if _platform(arguments) == "macos":
        return _run_macos(arguments, env, command)
    record_signals()  # a stop signal from here on means the program never starts
    policy = _policy(arguments, env)
    given = arguments["--summary"]
    if isinstance(given, str):
        return _run_with_summary(policy, command, env, given)
    try:
        return launch(policy, command, env)
    except (LaunchError, OSError) as error:
        raise CliError(str(error)) from None


def _mac_policy(command: str, arguments: Mapping[str, object],
                env: Mapping[str, str]) -> Policy:
    """The policy of `run` or `learn` with --platform macos: where there is no
    sandbox-exec (not a Mac), one line and nothing runs; else the agent's folder made as
    its first start would, then the spec read as on Linux."""
    from lnk_wrap.seatbelt import SANDBOX_EXEC
    from lnk_wrap.seatbelt_wrap import make_agent_folder

    if not os.access(SANDBOX_EXEC, os.X_OK):
        raise CliError(f"{command} --platform macos: no {SANDBOX_EXEC}: this is not a Mac "
                       "(wrap --platform macos prints the line on any machine); nothing ran")
    make_agent_folder(str(arguments["--spec"]), _settings_root(env))
    return _policy(arguments, env)


def _run_macos(arguments: Mapping[str, object], env: Mapping[str, str],
               command: list[str]) -> int:
    """run --platform macos (lnk_wrap.seatbelt_run): the macOS line, its parent outside
    it; where there is no sandbox-exec (not a Mac), one line and nothing runs."""
    from lnk_wrap.seatbelt import MacosError
    from lnk_wrap.seatbelt_ports import PortsError
    from lnk_wrap.seatbelt_run import run_macos

    if arguments["--summary"] is not None:
        raise CliError("run --platform macos: --summary is not built for macOS; nothing ran")
    policy = _mac_policy("run", arguments, env)
    try:
        return run_macos(policy, command, env)
    except (MacosError, PortsError) as error:
        raise CliError(f"{policy.spec}: macOS: {error}; nothing ran") from None
    except OSError as error:
        raise CliError(f"run --platform macos: {error}; nothing ran") from None


def _run_with_summary(policy: Policy, command: list[str], env: Mapping[str, str],
                      path: str) -> int:
    """`run --summary=FILE`: the run, then its summary written to FILE (opened before
    the sandbox exists), a run that could not start included."""
    from lnk_wrap.launch import LaunchError, launch
    from lnk_wrap.runs import Run, summary

    summary_fd = _open_summary(path)
    seen: list[Run] = []
    try:
        try:
            code = launch(policy, command, env, on_run=seen.append)
        except (LaunchError, OSError) as error:
            _write_summary(summary_fd, summary(None, EXIT_SANDBOX_FAILED,
                                               settings=policy.settings))
            raise CliError(str(error)) from None
        _write_summary(summary_fd, summary(seen[0] if seen else None, code,
                                           settings=policy.settings))
    finally:
        os.close(summary_fd)
    return code


def _learn(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    from lnk_wrap.launch import LaunchError
    from lnk_wrap.learn import format_commands, learn

    if _platform(arguments) == "macos":
        return _learn_macos(arguments, env, command)
    policy = _policy(arguments, env)
    if policy.network != "host" and not policy.site_packages:
        policy = policy.with_site_packages(_site_packages())  # its wire's proxy (h11)
    try:
        found = learn(policy, command, env)
    except (LaunchError, OSError) as error:
        raise CliError(str(error)) from None
    print(f"# lnk-sandbox learn: the programs the command ran and the hosts it was refused "
          f"under {policy.spec} (nothing was written)")
    from lnk_wrap.spec import commands_as_written

    print(format_commands(policy.commands, found.offered,
                          commands_as_written(policy.spec, env) if policy.spec else None))
    for path, why in found.refused:
        print(f"lnk-sandbox: not offered: {path}: {why}", file=sys.stderr)
    _print_network(policy, found.network)
    if found.status != 0:
        print(f"lnk-sandbox: the command exited with status {found.status}; a run that stops "
              "early may not have started every program it needs", file=sys.stderr)
    return found.status


def _learn_macos(arguments: Mapping[str, object], env: Mapping[str, str],
                 command: list[str]) -> int:
    """learn --platform macos (lnk_wrap.learn.learn_macos): the programs from Seatbelt's
    reports; on a machine with no sandbox-exec, one line and nothing run."""
    from lnk_wrap.learn import format_commands, learn_macos
    from lnk_wrap.seatbelt import SANDBOX_EXEC, MacosError
    from lnk_wrap.seatbelt_ports import PortsError

    policy = _mac_policy("learn", arguments, env)
    try:
        found = learn_macos(policy, command, env, sandbox_exec=SANDBOX_EXEC)
    except (MacosError, PortsError) as error:
        raise CliError(f"{policy.spec}: macOS: {error}; nothing ran") from None
    except OSError as error:
        raise CliError(f"learn --platform macos: {error}; nothing ran") from None
    print(f"# lnk-sandbox learn: the programs the command ran, from Seatbelt's reports, "
          f"under {policy.spec} (nothing was written)")
    print(format_commands(policy.commands, found.offered))
    for path, why in found.refused:
        print(f"lnk-sandbox: not offered: {path}: {why}", file=sys.stderr)
    if not found.offered:
        print("lnk-sandbox: learn --platform macos: no program was reported; a Mac whose "
              "reports read otherwise than the seed says offers none (never a wrong one)",
              file=sys.stderr)
    print("lnk-sandbox: learn --platform macos reads no hosts: `lnk-sandbox log WIRE "
          "--refused` lists the calls its wire refused", file=sys.stderr)
    if found.status != 0:
        print(f"lnk-sandbox: the command exited with status {found.status}; a run that stops "
              "early may not have started every program it needs", file=sys.stderr)
    return found.status


def _print_network(policy: Policy, seen: Seen | None) -> None:
    """learn's [network] part: the hosts to list on stdout, what is not offered and why
    (a provider's host, a metadata service …), folded or paused calls, on stderr."""
    from lnk_wrap.learn_network import format_network, group

    if seen is None:
        print(f"# [network]: mode {policy.network!r} has no wire: no call was seen")
        return
    print()
    print(format_network(policy.hosts, group(seen.hosts), seen.looked_up, mode=policy.network))
    for target, why in seen.not_offered:
        print(f"lnk-sandbox: not offered: {target}: {why}", file=sys.stderr)
    if seen.folded:
        print(f"lnk-sandbox: learn: {seen.folded} refusals were folded in the wire's log "
              "(many alike at once), their names not written: run learn again once these "
              "are listed", file=sys.stderr)
    if seen.paused:
        print(f"lnk-sandbox: learn: the wire paused ({seen.paused}); every call after was "
              "refused by the pause, not by name, and is not offered", file=sys.stderr)


def _controls(arguments: Mapping[str, object], env: Mapping[str, str],
              command: list[str]) -> int:
    """stop, on-stop, paused, resume: the kill switch and the pauses."""
    from lnk_wrap.controls_view import controls

    return controls(_settings_root(env), arguments, command)


def _additions(arguments: Mapping[str, object], env: Mapping[str, str],
               command: list[str]) -> int:
    """allow, disallow, allowed: a wire's additions (lnk_wrap.allow_view)."""
    from lnk_wrap.allow_view import AllowError, allow, allowed, disallow

    settings, wire, host = _settings_root(env), str(arguments["WIRE"]), arguments["HOST"]
    try:
        tcp = bool(arguments["--tcp"])
        if arguments["allow"]:
            return allow(settings, wire, str(host), tcp=tcp)
        if arguments["disallow"]:
            return disallow(settings, wire, host if isinstance(host, str) else None, tcp=tcp)
        return allowed(settings, wire, as_json=bool(arguments["--json"]))
    except AllowError as error:
        raise CliError(str(error)) from None


def _log(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    from lnk_wrap.wirelog_view import show_log

    settings = _settings_root(env)
    wire = arguments["WIRE"]
    since, last = arguments["--since"], arguments["-n"]
    return show_log(settings, wire if isinstance(wire, str) else None,
                    follow=bool(arguments["--follow"]), as_json=bool(arguments["--json"]),
                    since=since if isinstance(since, str) else None,
                    last=last if isinstance(last, str) else None,
                    refused=bool(arguments["--refused"]))


def _secret(arguments: Mapping[str, object], env: Mapping[str, str],
            command: list[str]) -> int:
    from lnk_common.secrets import SecretError
    from lnk_common.settings import SettingsError, settings_folder
    from lnk_wrap.secrets_view import secrets

    try:
        return secrets(settings_folder(env).root, arguments)
    except (SecretError, SettingsError) as error:
        raise CliError(str(error)) from None


def _tool(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    from lnk_common.settings import SettingsError, settings_folder
    from lnk_proxy.tools import ToolError
    from lnk_wrap.tools_view import tools

    try:
        return tools(settings_folder(env).root, arguments)
    except (ToolError, SettingsError) as error:
        raise CliError(str(error)) from None


def _guest(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    from lnk_common.settings import SettingsError, settings_folder
    from lnk_wrap.guests import GuestError
    from lnk_wrap.guests_view import guests

    try:
        return guests(settings_folder(env).root, arguments, env)
    except (GuestError, SettingsError) as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"{error.filename or 'a guest file'}: {error.strerror}") from None


def _enter(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    from lnk_wrap.enter import enter
    from lnk_wrap.guests import GuestError
    from lnk_wrap.launch import LaunchError

    given = arguments["--settings"]
    try:
        return enter(given if isinstance(given, str) else None,
                     str(arguments["NAME"]), env)
    except (GuestError, LaunchError) as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"cannot start the guest's session: {error}") from None


def _asks(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    """asks (the waiting questions, one whole, or the next to come) and answer."""
    from lnk_wrap.asks_view import answer, asks, wait_for_asks

    settings = _settings_root(env)
    if not arguments["asks"]:
        return answer(settings, str(arguments["ID"]), str(arguments["ANSWER"]))
    shown, timeout = arguments["--show"], arguments["--timeout"]
    if arguments["--wait"]:
        return wait_for_asks(settings, as_json=bool(arguments["--json"]),
                             timeout=timeout if isinstance(timeout, str) else None)
    return asks(settings, as_json=bool(arguments["--json"]),
                show=shown if isinstance(shown, str) else None)


def _url(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    from lnk_common.settings import SettingsError, settings_folder
    from lnk_wrap.seatbelt_ports import PortsError, url_port
    from lnk_wrap.urls_view import UrlsError, show_urls

    agent = arguments["--agent"]
    try:
        spec = _policy(arguments, env) if arguments["--spec"] else None
        settings = settings_folder(env).root if spec is None else spec.settings
        port = None
        if _platform(arguments) == "macos":
            port = url_port(settings, spec, agent if isinstance(agent, str) else None)
        return show_urls(settings, agent if isinstance(agent, str) else None, spec,
                         as_json=bool(arguments["--json"]), port=port)
    except (SettingsError, UrlsError, PortsError) as error:
        raise CliError(str(error)) from None


def _check(arguments: Mapping[str, object], env: Mapping[str, str], command: list[str]) -> int:
    if _platform(arguments) == "macos":
        from lnk_wrap.check_macos import print_report

        return print_report(_policy(arguments, env) if arguments["--spec"] else None,
                            as_json=bool(arguments["--json"]))
    from lnk_wrap.check import report, show, verdict

    if arguments["--probe"]:
        return _probe(report(env), env, as_json=bool(arguments["--json"]))
    found = report(env, _policy(arguments, env) if arguments["--spec"] else None)
    found["verdict"] = verdict(found)
    if arguments["--json"]:
        import orjson

        sys.stdout.buffer.write(orjson.dumps(found, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(show(found))
    return 0 if found["ready"] else EXIT_SANDBOX_FAILED


def _probe(machine: dict[str, object], env: Mapping[str, str], *, as_json: bool) -> int:
    """check --probe: the escape attempts (lnk_wrap.probe); 0 when every one held."""
    from lnk_wrap.probe import EXIT_OPEN, ProbeError, probe, show

    try:
        found = probe(env, _settings_root(env), machine, site_packages=_site_packages())
    except ProbeError as error:
        raise CliError(f"check --probe: {error}") from None
    if as_json:
        import orjson

        sys.stdout.buffer.write(orjson.dumps(found, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(show(found))
    return 0 if found["held"] else EXIT_OPEN


def _explain(arguments: Mapping[str, object], env: Mapping[str, str],
             command: list[str]) -> int:
    from lnk_wrap.explain import main as explain

    return explain(_policy(arguments, env), as_json_output=bool(arguments["--json"]))


def _status(arguments: Mapping[str, object], env: Mapping[str, str],
            command: list[str]) -> int:
    from lnk_wrap.status import main as status

    return status(_settings_root(env), as_json=bool(arguments["--json"]),
                  watch=bool(arguments["--watch"]))


# Each command's handler, by the key docopt sets for it (default deny: a command in no
# row is a usage mistake). A handler takes docopt's answer, the environment and the
# program to run (the usage's COMMAND).
# mcp-remote has no row: main hands its argv to its own parser before docopt reads any.
_COMMANDS: dict[str, _Handler] = {
    "wrap": _wrap,
    "run": _run,
    "learn": _learn,
    "stop": _controls,
    "on-stop": _controls,
    "paused": _controls,
    "resume": _controls,
    "allow": _additions,
    "disallow": _additions,
    "allowed": _additions,
    "log": _log,
    "secret": _secret,
    "tool": _tool,
    "guest": _guest,
    "enter": _enter,
    "asks": _asks,
    "answer": _asks,
    "url": _url,
    "check": _check,
    "explain": _explain,
    "status": _status,
}


if __name__ == "__main__":
    main()
