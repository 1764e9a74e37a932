"""lnk-sandbox enter NAME: a guest's SSH session, run by sshd through the forced command.

sshd runs the command of the guest's authorized_keys line whatever the client asked; what
it asked is in SSH_ORIGINAL_COMMAND:

- nothing (a login): the owner's login shell, `-l`, in the guest's sandbox (interactive
  when sshd gave a terminal);
- `internal-sftp` (sshd passes the subsystem's command for a forced command) or an
  `sftp-server` path: this machine's sftp-server, inside (scp of OpenSSH 9 speaks sftp
  too);
- anything else (a command, `scp -t`/`-f` of the old scp protocol): the owner's shell
  `-c` with it, inside.

The guest's spec, as kept in guests.toml, is read again at every session by the spec
loader; a path in it that became a link since `guest add` is refused (and the launcher
checks again what can change, as for every run). The session's sandbox is the spec's,
plus the guest's own folder in Link's settings (`guests/NAME`, written, its dot files
open: nothing of the person's runs there), which is its HOME and working folder inside;
its wire is `guest-NAME`. The program keeps the SSH session's terminal: no bubblewrap
`--new-session`, so job control and Ctrl-C work (the seccomp filter refuses TIOCSTI, which
is what --new-session guards against). Nothing of the session reaches what runs outside
(the launcher's helpers): their environment, HOME and working folder are made from the
owner's account, in a session of their own, with no terminal (lnk_wrap.outside); what is
the owner's to read (the first-run notice) goes to the guests log, not to the guest.
"""

from __future__ import annotations

import os
import pwd
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from lnk_common.policy import Policy

__all__ = ["LOG_PATH", "SFTP_SERVERS", "enter", "log_session", "session_command",
           "session_policy"]

# Where Debian, Fedora, Arch and Alpine put OpenSSH's sftp-server.
SFTP_SERVERS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                "/usr/lib/ssh/sftp-server", "/usr/libexec/sftp-server")
# SSH_ORIGINAL_COMMAND is the guest's own text: bounded, as any input.
MAX_COMMAND_BYTES = 256 * 1024


def find_sftp_server() -> str | None:
    return next((path for path in SFTP_SERVERS if os.access(path, os.X_OK)), None)


def session_command(original: str | None, shell: str, sftp_server: str | None) -> list[str]:
    """What the guest's session runs (pure): see the module's docstring."""
    from lnk_wrap.guests import GuestError

    if original is None:
        return [shell, "-l"]
    if len(original.encode("utf-8", "surrogateescape")) > MAX_COMMAND_BYTES:
        raise GuestError(f"the command is longer than {MAX_COMMAND_BYTES} bytes")
    words = original.split()
    if words and (words[0] == "internal-sftp" or os.path.basename(words[0]) == "sftp-server"):
        if sftp_server is None:
            raise GuestError("sftp: no sftp-server on this machine (looked at "
                             + ", ".join(SFTP_SERVERS) + ")")
        return [sftp_server, *words[1:]]
    return [shell, "-c", original]


def session_policy(settings: str, name: str, env: Mapping[str, str]) -> Policy:
    """The guest's sandbox for one session."""
    from lnk_wrap import guests_view
    from lnk_wrap.guests import GuestError, wire_name

    kept = guests_view.read_guests(settings)
    guest = kept.get(name)
    if guest is None:
        raise GuestError(f"no guest named {name} in {guests_view.guests_path(settings)}; "
                         "refusing the session")
    policy = guests_view.kept_policy(settings, guest, env)
    if policy.open_pages:  # never kept by guest add; refused if edited in
        raise GuestError(f"{guests_view.guests_path(settings)}: guests.{name}.spec.verbs.open: "
                         "a guest does not open pages in your browser; refusing the session")
    # Checked again at each session: what lnk-sandbox runs from may have moved since.
    guests_view.refuse_written_outside(
        policy, env, os.path.abspath(sys.argv[0]),
        f"{guests_view.guests_path(settings)}: guests.{name}.spec.")
    folder = os.path.join(settings, guests_view.GUESTS_FOLDER)
    home = guests_view.guest_home(settings, name)
    for path in (folder, home):
        if os.path.islink(path) or not os.path.isdir(path) or os.path.realpath(path) != path:
            raise GuestError(f"the guest's folder {path} is missing or not a plain folder; "
                             "refusing the session")
    policy = policy.replace(
        name=wire_name(name), keep_session=True,
        write=(*policy.write, home), write_dot_files=(*policy.write_dot_files, home),
        hide=(*policy.hide, folder))
    if policy.has_wire():
        from lnk_wrap.cli import _site_packages

        policy = policy.with_site_packages(_site_packages())
    return policy


LOG_PATH = ("sandbox", "guests.log")


def log_session(settings: str, name: str, env: Mapping[str, str], event: str) -> None:
    """One line in Link's guests log (bounded: a guest connecting in a loop cannot grow
    it): when, which guest, from where (SSH_CONNECTION's address), what happened. A log
    that cannot be written is not a reason to refuse: it guards nothing."""
    from lnk_common.boundedlog import BoundedLog, clip
    from lnk_wrap.guests_view import shown

    client = (env.get("SSH_CONNECTION") or "-").split(" ")[0] or "-"
    line = (f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} guest-{name} "
            f"{shown(client)} {shown(event)}")
    try:
        os.makedirs(os.path.join(settings, LOG_PATH[0]), mode=0o700, exist_ok=True)
        log = BoundedLog(os.path.join(settings, *LOG_PATH))
        try:
            log.append((clip(line) + "\n").encode("utf-8", "replace"))
        finally:
            log.close()
    except OSError:
        pass


def _kind(command: list[str], original: str | None) -> str:
    if original is None:
        return "a login shell"
    if command[1:2] != ["-c"]:
        return "sftp"
    return "scp" if original.startswith("scp ") else "a command"


def enter(settings_given: str | None, name: str, env: Mapping[str, str]) -> int:
    from lnk_common.settings import SettingsError, locate, settings_folder
    from lnk_wrap.guests import GuestError, name_problem
    from lnk_wrap.launch import LaunchError, launch, record_signals

    record_signals()  # a hang-up before the program starts means it never starts
    problem = name_problem(name)
    if problem:
        raise GuestError(f"{name!r}: {problem}")
    try:
        found = locate(settings_given) if settings_given else settings_folder(env)
    except SettingsError as error:
        raise GuestError(str(error)) from None
    settings = found.root
    try:
        policy = session_policy(settings, name, env)
        shell = pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
        if not os.path.isabs(shell) or not os.access(shell, os.X_OK):
            shell = "/bin/sh"
        original = env.get("SSH_ORIGINAL_COMMAND")
        command = session_command(original, shell, find_sftp_server())
    except GuestError as error:
        log_session(settings, name, env, f"refused: {error}")
        raise
    home = os.path.join(settings, "guests", name)
    session_env = {key: value for key, value in env.items() if key != "LNK_HOME"}
    session_env["HOME"] = home
    session_env["PWD"] = home
    log_session(settings, name, env, f"session: {_kind(command, original)}")
    if policy.tools:  # what a guest's session can ask (its pages are refused)
        log_session(settings, name, env, "its questions wait in your queue only: "
                    "lnk-sandbox asks, then lnk-sandbox answer ID yes|no (an SSH session "
                    "knows no screen or terminal of yours)")

    def owners_notice(line: str) -> None:  # the guest's stderr is the guest's screen
        log_session(settings, name, env, f"notice: {line}")

    try:
        # The session's environment, HOME and folder are the program's, inside only:
        # the helpers outside are given the owner's account (lnk_wrap.outside).
        status = launch(policy, command, session_env, cwd=home, guest=name,
                        notice=owners_notice)
    except (LaunchError, OSError) as error:
        log_session(settings, name, env, f"refused: {error}")
        raise
    log_session(settings, name, env, f"ended: status {status}")
    return status
