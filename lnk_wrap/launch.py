"""lnk-sandbox-launch: stands in front of bubblewrap, outside the sandbox.

    lnk-sandbox-launch POLICY-OPTIONS -- COMMAND [ARG…]

The one command line that `wrap` prints starts here, so everything this needs is in its
options (lnk_common.policy): no file descriptor, no process of ours is assumed.

Order of operations:
1. Read the policy from argv (strict; an error is exit 125), and check that the install
   it names still has every helper's module and the libraries it names (check_install:
   a line a harness kept may outlive them; lnk_wrap.helpers).
2. Check it still holds on this machine: every granted path is still what it was when
   the spec was read (no link swapped in since), the path to Link's settings folder
   still leads there and no link on it lies where this sandbox writes (F6:
   check_settings_path), the folder exists (made 0700 if not, so a sandbox cannot make
   it), no hidden path is missing where the program could create it. A working
   directory the sandbox does not see is said in one line and the program starts in /
   instead. The program's working folder is taken (bubblewrap's --chdir), and this
   launcher goes to /: nothing it starts outside works where a sandbox writes.
3. Find the dot files of written folders to hold read only (lnk_wrap.dotfiles), refuse
   any with a second name the sandbox could write it by (F7: lnk_wrap.heldlinks), make
   what the helpers outside are given (lnk_wrap.outside: a guest's session, the owner's
   account; a run, no variable naming a path the sandbox writes) and find bubblewrap
   with it, and put stand-ins where missing ones go, listed with this run
   (lnk_wrap.standins). A spec whose write_dot_files opens folders says so on its
   first run.
4. Build bubblewrap's argv from typed options (lnk_wrap.bwrap.plan) and the init's:
   the C one where bin/setup built it (lnk_wrap/sandbox_init/lnk-init.c), else
   lnk_wrap.init, which does the same in Python (init_argv).
5. Fork the sandbox's watch (lnk_execwatch.main), then start bubblewrap: the watch
   readies itself while bubblewrap makes the sandbox, and outlives this launcher if it
   is killed meanwhile, to end what bubblewrap made (lnk_wrap.leftovers, bubblewrap's
   issue #633); learn the sandbox's pid from --info-fd, wait for the
   watch's word that it holds the init's listener (so the init exists), give the init
   its go-ahead, pass on the signals it is sent (bubblewrap itself does not), and exit
   with the program's status. A TERM, INT, HUP or QUIT that arrives before the
   go-ahead (recorded from this launcher's first moment) means the program never
   starts: the sandbox is killed and the exit status is 128+N.
6. Let go of the stand-ins: each is removed once no live run holds it, if it is
   still the empty one made. A launcher killed outright leaves that to the next run.

Exit status: the program's own; 128+N when it died of signal N (as a shell reports it);
125 when the sandbox could not be made (this launcher, bubblewrap or the init failed),
126 when the command cannot be run, 127 when it is not found (as env(1) does).
"""

from __future__ import annotations

import os
import select
import sys

from lnk_common.policy import Policy, PolicyArgvError, helper_argv, split_argv
from lnk_wrap import bwrap as bwrap_plan
from lnk_wrap import standins
from lnk_wrap.outside import OUTSIDE_FOLDER, without_loader_variables
from lnk_wrap.system import gather, runtime_paths

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable, Mapping

    from lnk_common.endpoints import Listener
    from lnk_wrap import home as homes
    from lnk_wrap.outside import Outside
    from lnk_wrap.runs import Run
else:
    import _signal as signal  # not `signal`: its enum wrappers cost 4 ms at every start

__all__ = ["EXIT_SANDBOX_FAILED", "NATIVE_INIT", "NATIVE_INIT_STALE_NS", "LaunchError",
           "init_argv", "main"]

EXIT_SANDBOX_FAILED = 125
# The sandbox's init in C, in our packages' folder (built by bin/setup from its .c beside
# it): it starts in under a millisecond where lnk_wrap.init is a Python start and its
# imports, some 15 ms a sandbox start (docs/decisions/0039-the-start-back.md).
NATIVE_INIT = ("lnk_wrap", "sandbox_init", "lnk-init")
# The C init is not run when its source is newer than it by more than this: an install
# writes the two within moments, in either order (pip writes a wheel's files in the
# wheel's order, the program first), while a checkout changes the source long after
# bin/setup built the program.
NATIVE_INIT_STALE_NS = 2 * 10**9
# The signals CPython sets to be ignored at its start (Python/pylifecycle.c), which a
# process it spawns would otherwise inherit ignored, and bubblewrap and the init pass on.
PYTHON_IGNORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
# How the proxy is given the run's model placeholder: in its environment, never in its
# argv (readable by every user in /proc).
PLACEHOLDER_VARIABLE = "LNK_PLACEHOLDER"

# The signals a caller uses to talk to a program; each is passed on to it. SIGKILL and
# SIGSTOP cannot be caught: a killed launcher takes the sandbox with it (--die-with-parent).
FORWARDED_SIGNALS = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGCONT,
)

# The signals that ask a program to end. One that arrives before the program may start
# means it never starts (exit 128+N), whenever during the start it came.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)

BWRAP_SEARCH = ("/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap")


class LaunchError(Exception):
    """The sandbox cannot be made as the policy says; nothing runs."""


def find_bwrap(env: Mapping[str, str]) -> str:
    """$LNK_SANDBOX_BWRAP if set (exactly that, or an error), else bubblewrap from PATH,
    else its usual places; never a relative path."""
    fix = ("install it (Debian/Ubuntu: apt-get install bubblewrap, "
           "Fedora: dnf install bubblewrap)")
    chosen = env.get("LNK_SANDBOX_BWRAP", "")
    if chosen:
        if os.path.isabs(chosen) and os.access(chosen, os.X_OK):
            return chosen
        raise LaunchError(f"bubblewrap is not at LNK_SANDBOX_BWRAP={chosen}; {fix}")
    for folder in [*env.get("PATH", "").split(":"), *(os.path.dirname(p) for p in BWRAP_SEARCH)]:
        candidate = os.path.join(folder, "bwrap")
        if os.path.isabs(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise LaunchError(f"bubblewrap is not installed; {fix}")


def check_still_holds(policy: Policy) -> None:
    """Refuse when the machine no longer matches what the spec resolved to."""
    for path in (*policy.read, *policy.write, *policy.reopen):
        if not os.path.lexists(path):
            raise LaunchError(
                f"{path} is granted by {policy.spec or 'the policy'} but no longer exists"
            )
        real = os.path.realpath(path)
        if real != path:
            raise LaunchError(
                f"{path} became a link to {real} since the spec was read; refusing "
                "(read the spec again if this is meant)"
            )
    for path in policy.hide:
        if os.path.islink(path) or (os.path.lexists(path) and os.path.realpath(path) != path):
            raise LaunchError(f"hidden path {path} is now a link; refusing")
        if not os.path.lexists(path):
            for granted in (*policy.write, *policy.read):
                if bwrap_plan.inside(path, granted) and not any(
                    bwrap_plan.inside(path, other) and other != path
                    for other in (*policy.hide, policy.settings)
                ):
                    raise LaunchError(
                        f"hidden path {path} does not exist and lies in granted folder "
                        f"{granted}: it could be made while the program runs, and would "
                        "not be hidden; create it (mkdir) or remove the hide"
                    )


def check_settings_path(policy: Policy) -> None:
    """Refuse a run that could change which folder Link's settings is (F6).

    The path the verbs name it by (the line's --settings-via, else --settings) is
    followed again (lnk_common.settings.locate, the one function every verb uses): it
    must still lead to the folder the line was made for, and no link on the way may lie
    in a folder this sandbox writes, or the program could put a folder of its own in the
    link's place and every later stop, log, paused, resume and run would take it. The
    real folders on the way need no check here: the mount plan pins each one a sandbox
    could rename (lnk_wrap.bwrap._folders_to_pin)."""
    from lnk_common.settings import SettingsError, locate

    try:
        found = locate(policy.settings_via or policy.settings)
    except SettingsError as error:
        raise LaunchError(str(error)) from None
    if found.root != policy.settings:
        raise LaunchError(
            f"Link's settings folder {found.named} now leads to {found.root}, not to "
            f"{policy.settings} as when the command line was made (a link on the way "
            "changed); wrap the command again"
        )
    nothing_found = bwrap_plan.HostFacts(system_dirs=(), system_links=(), system_hidden=())
    for link in found.links:
        parent = os.path.dirname(link)
        if bwrap_plan.access_at(policy, nothing_found, parent) != bwrap_plan.Access.WRITE:
            continue
        written = max((folder for folder in policy.write if bwrap_plan.inside(parent, folder)),
                      key=len)
        raise LaunchError(
            f"Link's settings folder {found.root} is reached through the link {link} in "
            f"{parent}, which this sandbox writes: it could put a folder of its own there, "
            "and stop, log, paused, resume and later runs would take that one; set "
            f"LNK_HOME={found.root} for every lnk-sandbox command, or do not write {written}"
        )


def _writable_with(policy: Policy, held: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a sandbox of `policy` could write `path` once `held` is held read only
    (the mount plan's own judgement; the machine's folders play no part in it)."""
    facts = bwrap_plan.HostFacts(system_dirs=(), system_links=(), system_hidden=())

    def writable(path: str) -> bool:
        return (bwrap_plan.access_at(policy, facts, path) == bwrap_plan.Access.WRITE
                and not any(bwrap_plan.inside(path, folder) for folder in held))

    return writable


def ensure_settings_folder(path: str) -> None:
    """Make Link's settings folder (0700) if missing: a sandbox that writes its parent
    must never be the one to make it."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        raise LaunchError(f"Link's settings folder {path} is not a folder")
    os.makedirs(path, mode=0o700, exist_ok=True)


def _say(message: str) -> None:
    print(f"lnk-sandbox: {message}", file=sys.stderr)


def notice_first_run(policy: Policy, say: Callable[[str], None] = _say) -> None:
    """A spec that opens dot files says which, through `say` (stderr; a guest's session
    gives the owner's guests log: the notice is the owner's, and stderr is the guest's),
    the first time it runs here. Specs are remembered by what they resolve to, not by
    file name: a renamed copy is the same spec, and an edited one is a new one."""
    if not policy.write_dot_files:
        return
    try:  # hashlib's import costs 3 ms at every start; its C module alone does not
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # Python 3.12+ renamed it
        from hashlib import sha256

    content = Policy(settings=policy.settings, read=policy.read, write=policy.write,
                     hide=policy.hide, reopen=policy.reopen,
                     write_dot_files=policy.write_dot_files).to_argv()
    digest = sha256("\0".join(content).encode("utf-8", "surrogateescape")).hexdigest()
    folder = os.path.join(policy.settings, "sandbox", "specs-seen")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    try:
        fd = os.open(os.path.join(folder, digest),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.write(fd, f"{policy.spec}\n".encode("utf-8", "surrogateescape"))
    os.close(fd)
    say(f"first run of {policy.spec or 'this policy'}: it lets the sandbox write the dot "
        f"files (.git, hooks, .envrc, editor settings) of {', '.join(policy.write_dot_files)}"
        "; what it opens (lnk-sandbox explain):")
    from lnk_wrap.explain import gather, opens, plain_line

    for line in opens(policy, gather(policy)):
        say(plain_line(f"  {line}"))


def with_additions(policy: Policy, say: Callable[[str], None] = _say) -> Policy:
    """A wire with additions (`lnk-sandbox allow`) says so at every start, through `say`
    (its proxy takes the hosts at each call, beside the spec's), and this start's policy
    gets its endpoint additions (`allow --tcp`) in its [tcp] endpoints: an endpoint's
    socket inside is made before the program starts. Only a wire of the proxy's network
    takes them (its line carries the proxy's libraries); ones the plan cannot place, or
    a file that cannot be taken, are said and none is taken (nothing more opens). The
    file is looked for here, before its module is imported
    (lnk_common.additions.additions_path names the same file), so a start with none
    costs one stat."""
    if policy.network != "proxy" or not os.path.lexists(
            os.path.join(policy.settings, "sandbox", "wires", policy.name, "allowed")):
        return policy
    from lnk_common import endpoints
    from lnk_wrap.allow_view import added_endpoints, start_note

    note = start_note(policy.settings, policy.name)
    if note:
        say(note)
    added = tuple(dict.fromkeys((*policy.endpoints,
                                 *added_endpoints(policy.settings, policy.name))))
    if added == policy.endpoints:
        return policy
    try:
        endpoints.listeners(proxy=policy.has_proxy_port(), endpoints=added, lan=policy.lan,
                            localhost_ports=(*policy.localhost_ports, *policy.local_models))
        return policy.replace(endpoints=added)
    except (endpoints.EndpointError, PolicyArgvError) as error:
        say(f"the wire {policy.name}'s endpoint additions are not taken: {error}")
        return policy


def _program_pid(sandbox_pid: int) -> int | None:
    """bubblewrap's pid 1 inside reaps; the program is its child."""
    try:
        with open(f"/proc/{sandbox_pid}/task/{sandbox_pid}/children", "rb") as handle:
            children = handle.read().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _read_info(fd: int) -> dict[str, int]:
    """bubblewrap writes `{"child-pid": N, "net-namespace": N, …}` to --info-fd once the
    sandbox exists. (Read by hand: the json module costs an import at every start.)"""
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(fd)
    found: dict[str, int] = {}
    for key in (b"child-pid", b"net-namespace"):
        _, seen, rest = data.partition(b'"' + key + b'":')
        digits = rest.lstrip(b" ").split(b",")[0].split(b"}")[0].strip()
        if seen and digits.isdigit():
            found[key.decode()] = int(digits)
    return found


class _Signals:
    """What becomes of the signals this launcher is sent: until the program may start,
    the first stop signal is recorded (and the others dropped: there is no program to
    give them to); from the go-ahead on, each is passed on to the program."""

    __slots__ = ("sandbox_pid", "started", "stop")

    def __init__(self) -> None:
        self.stop = 0
        self.started = False
        self.sandbox_pid = 0


_SIGNALS = _Signals()


def record_signals() -> None:
    """Take the forwarded signals from now on (the launcher's first moment: its main,
    or `run` before it reads the spec). Before, a TERM ended the launcher outright
    before the sandbox existed (nothing ran), but once bubblewrap was started and
    until its pid was known, a TERM or INT was dropped and the program ran anyway."""
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, _on_signal)


def _on_signal(signum: int, _frame: object) -> None:
    state = _SIGNALS
    if state.started:
        target = _program_pid(state.sandbox_pid) if state.sandbox_pid else None
        if target:
            try:  # noqa: SIM105 (contextlib is one more import at every start)
                os.kill(target, signum)
            except ProcessLookupError:
                pass
    elif signum in STOP_SIGNALS and not state.stop:
        state.stop = signum


# How long the launcher's wait for the sandbox's init sleeps before it looks again at the
# stop signals (a handler runs during the wait, but the wait itself goes on: PEP 475). A
# stop signal ends the wait at most this late; the init and bubblewrap end it at once.
STOP_LOOK_MS = 20


def _wait_for_init(sandbox_pid: int | None, child: int, ready: int) -> None:
    """Until the sandbox's init exists, a stop signal came, or bubblewrap ended. The
    go-ahead is given only then: a signal passed on before the init exists would find no
    one to take it, and the program would start after it was dropped. The watch says
    when (a byte, or the end of its pipe `ready`): it writes once it holds the filter's
    listener, which the init itself sent it, from inside. Blocking, not looking at /proc
    in a loop: the launcher takes no CPU from bubblewrap and the init meanwhile."""
    if sandbox_pid is None:
        return
    try:
        ended = os.pidfd_open(child)
    except ProcessLookupError:
        return
    try:
        poller = select.poll()
        poller.register(ready, select.POLLIN)
        poller.register(ended, select.POLLIN)
        while not _SIGNALS.stop and not poller.poll(STOP_LOOK_MS):
            pass
    finally:
        os.close(ended)


def _go_ahead_unless_stopped(go_write: int, sandbox_pid: int | None) -> int:
    """Write the init's go-ahead, unless a stop signal came first: returns that signal
    (0 when the program may start). The stop signals are blocked from the decision to
    the write, so one arriving meanwhile is delivered after it, to the program."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        # pthread_sigmask has run the handlers of signals that came before the block.
        stop = _SIGNALS.stop
        if not stop and sandbox_pid is not None:
            _SIGNALS.sandbox_pid = sandbox_pid
            os.write(go_write, b"x")
            _SIGNALS.started = True
    finally:
        os.close(go_write)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    return stop


def _check_architecture() -> None:
    """No sandbox on an architecture with no seccomp filter (lnk_common.arch): refused
    here, before anything starts, in one line (the init refuses too, inside)."""
    from lnk_common import arch

    if not arch.supported():
        raise LaunchError(f"this machine is {arch.MACHINE}, and lnk-sandbox's seccomp filter "
                          f"is built for {', '.join(arch.ARCHITECTURES)} only: no sandbox "
                          "starts unfiltered")


# Landlock's scope of abstract unix sockets (ABI 6): with this machine's network
# namespace, the only thing between a sandbox and the abstract sockets of the person's
# session (X11's, D-Bus's, an agent's).
HOST_NETWORK_LANDLOCK_ABI = 6
# How often a sandbox with the host's network looks at the kill switch: stop's "within
# a second", as every proxy does.
HOST_STOP_POLL_SECONDS = 1.0


def _check_host_network(policy: Policy) -> None:
    """mode "host" starts only where its abstract unix sockets stay closed and the kill
    switch is off (there is no proxy to refuse its calls)."""
    from lnk_common import wirestate
    from lnk_wrap import landlock

    abi = landlock.abi_version()
    if abi < HOST_NETWORK_LANDLOCK_ABI:
        raise LaunchError(
            f"[network] mode = \"host\" of {policy.spec or 'the policy'} needs Landlock ABI "
            f"{HOST_NETWORK_LANDLOCK_ABI} (Linux 6.12) to keep this machine's abstract unix "
            f"sockets closed, and this kernel has {abi}: use mode = \"proxy\"")
    if wirestate.is_stopped(policy.settings):
        raise LaunchError("the kill switch is on (lnk-sandbox stop), and a sandbox with this "
                          "machine's network has no wire to close: not started "
                          "(`lnk-sandbox stop --clear` lifts it)")


def _end_at_the_kill_switch(settings: str, sandbox_pid: int | None, child: int
                            ) -> Callable[[], None]:
    """mode "host": no proxy closes its calls at `stop`, so the sandbox itself is ended
    (within HOST_STOP_POLL_SECONDS), said on stderr, by a thread; returns what the
    launcher calls once bubblewrap has ended and before it is reaped, after which the
    thread kills nothing."""
    import threading

    from lnk_common import wirestate

    done = threading.Event()
    lock = threading.Lock()

    def watch() -> None:
        while not done.wait(HOST_STOP_POLL_SECONDS):
            if wirestate.is_stopped(settings):
                with lock:
                    if done.is_set():
                        return
                    _say("the kill switch is on (lnk-sandbox stop): this sandbox has this "
                         "machine's network and no wire to close, so it is ended")
                    _kill_sandbox(sandbox_pid, child)
                return

    def finish() -> None:
        with lock:
            done.set()

    threading.Thread(target=watch, name="lnk-host-stop", daemon=True).start()
    return finish


def _kill_sandbox(sandbox_pid: int | None, child: int) -> None:
    """The sandbox's own first process first (bubblewrap's inside one outlives an outer
    one that is killed), then bubblewrap; the init, which waits for the go-ahead,
    refuses at the end of its pipe anyway."""
    for pid in (sandbox_pid, child):
        if pid is not None:
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def launch(policy: Policy, command: list[str], env: Mapping[str, str], *,
           cwd: str | None = None, guest: str = "",
           notice: Callable[[str], None] = _say,
           on_run: Callable[[Run], None] | None = None) -> int:
    """Run `command` in the sandbox of `policy`, with `env` (the program's, before the
    verbs' variables), in `cwd` (the program's working folder; this process's by
    default). `guest`: a guest's session (lnk_wrap.enter): the helpers outside are given
    nothing of the session (lnk_wrap.outside). `notice`: where the first-run notice of a
    spec that opens dot files goes (the person's; stderr by default). `on_run`: given
    the run as its wire's log marks it (lnk_wrap.runs), once it starts."""
    record_signals()
    _check_architecture()
    check_still_holds(policy)
    check_settings_path(policy)
    ensure_settings_folder(policy.settings)
    policy = with_additions(policy, notice)
    if cwd is None:
        try:
            cwd = os.getcwd()
        except FileNotFoundError:
            raise LaunchError("the working directory no longer exists") from None
    # The program's folder is bubblewrap's --chdir; this launcher, and everything it
    # starts outside, works where no sandbox writes (lnk_wrap.outside).
    os.chdir(OUTSIDE_FOLDER)
    if policy.network == "host":
        _check_host_network(policy)
    from lnk_wrap import home as homes

    try:
        home = homes.choose(policy, env, wire=policy.name,
                            writes=_writable_with(policy, ()))
    except homes.HomeError as error:
        raise LaunchError(str(error)) from None
    # The spec's own grants, for its first-run notice: a HOME made for the wire is not
    # one of the person's folders.
    as_written, policy = policy, home.policy
    if not policy.write:  # no written folder: no dot file to hold, nothing to look at
        outside = _outside(policy, env, (), guest)
        return _run_sandbox(_bwrap_for(policy, env, outside, ()), policy, command, env, cwd,
                            (), outside, home, on_run)
    from lnk_wrap import dotfiles

    known = {path: kind for path, kind, _ in standins.index_entries(policy.settings)}
    try:
        found = dotfiles.find(policy, env, known)
    except dotfiles.DotFileError as error:
        raise LaunchError(str(error)) from None
    from lnk_wrap.heldlinks import refusal as hard_link_refusal

    hard_linked = hard_link_refusal(
        found.held, _writable_with(policy, (*found.held, *found.standins)))
    if hard_linked is not None:  # F7: a held file must have no other name to write
        raise LaunchError(hard_linked)
    # What the helpers outside are given, and bubblewrap, before any stand-in is made.
    held = (*found.held, *found.standins)
    outside = _outside(policy, env, held, guest)
    bwrap = _bwrap_for(policy, env, outside, held)
    notice_first_run(as_written, notice)
    # A run file only when this run may hold stand-ins: ones it makes, or ones another
    # run made that it finds in place (it must hold them too, or that run's end would
    # remove them from under its mounts). Every run with written folders sweeps what
    # killed runs left.
    run = None
    if found.standins or (found.held and standins.index_exists(policy.settings)):
        run = standins.Run(policy.settings)
    try:
        try:
            in_place, notes = standins.hold(policy.settings, run, found.standins,
                                            found.held)
        except standins.StandInError as error:
            raise LaunchError(str(error)) from None
        for note in notes:
            _say(note)
        return _run_sandbox(bwrap, policy, command, env, cwd,
                            tuple({**found.held, **in_place}), outside, home, on_run)
    finally:
        if run is not None:
            for note in standins.release(policy.settings, run):
                _say(note)
            run.end()


def _outside(policy: Policy, env: Mapping[str, str], held: tuple[str, ...], guest: str
             ) -> Outside:
    """What the helpers outside are given (lnk_wrap.outside): a guest's session, none of
    it; a run, the caller's environment less what names a path this sandbox writes."""
    from lnk_wrap.outside import Account, outside_environment

    return outside_environment(env, guest=guest, account=Account.own(),
                               written=_writable_with(policy, held),
                               resolve=os.path.realpath)


def _bwrap_for(policy: Policy, env: Mapping[str, str], outside: Outside,
               held: tuple[str, ...]) -> str:
    """Bubblewrap runs outside: looked for on the helpers' PATH (never a folder this
    sandbox writes), or at the caller's LNK_SANDBOX_BWRAP unless this sandbox writes it.
    Found, the code that runs outside is checked not to be written (check_code)."""
    if (env.get("LNK_SANDBOX_BWRAP") and "LNK_SANDBOX_BWRAP" not in outside.env
            and not outside.guest):
        raise LaunchError(f"LNK_SANDBOX_BWRAP={env['LNK_SANDBOX_BWRAP']} names a path this "
                          "sandbox writes: it would run outside, as you; refusing")
    bwrap = find_bwrap(outside.env)
    check_code(policy, _writable_with(policy, held), bwrap)
    return bwrap


def check_code(policy: Policy, writable: Callable[[str], bool], bwrap: str) -> None:
    """Refuse a sandbox that could write the code its helpers run outside: bubblewrap,
    this interpreter, our packages (lnk_*: a helper imports more of them after the
    sandbox has started, the proxy at its first connection) and every folder it imports
    from (the standard library, the proxy's site-packages). None may lie in a written
    folder, and no written folder in one of them (each as named and as it resolves).
    The folder that holds our packages may hold written folders of its own (a
    checkout's examples/workspace): a sandbox cannot put a module beside our packages
    from there."""
    from lnk_common.chain import package_root

    root = package_root()
    trees = [os.path.join(root, name) for name in sorted(os.listdir(root))
             if name.startswith("lnk_") and os.path.isdir(os.path.join(root, name))]
    trees += [folder for folder in (*sys.path, policy.site_packages)
              if os.path.isabs(folder) and folder != root and os.path.isdir(folder)]
    points = [bwrap, os.path.realpath(sys.executable), root]
    why = ("code that runs outside this sandbox, as you (bubblewrap, Python, Link's own); "
           "refusing: grant a folder that holds none of it")
    for path in (*points, *trees):
        for form in {os.path.normpath(path), os.path.realpath(path)}:
            if writable(form):
                raise LaunchError(f"this sandbox writes {form}, {why}")
            inner = next((folder for folder in policy.write
                          if path in trees and bwrap_plan.inside(folder, form)), None)
            if inner is not None:
                raise LaunchError(f"this sandbox writes {inner}, inside {form}, {why}")


def _run_sandbox(bwrap: str, policy: Policy, command: list[str], env: Mapping[str, str],
                 cwd: str, held: tuple[str, ...], outside: Outside, home: homes.Choice,
                 on_run: Callable[[Run], None] | None = None) -> int:
    """Make the sandbox and run `command` in it: what bubblewrap is told (the host's
    facts), the program's environment and HOME, then the start and the wait."""
    from lnk_common.chain import package_root
    from lnk_wrap.home import environment as home_environment

    # The program's HOME (lnk_wrap.home); the helpers outside keep the caller's.
    env = home_environment(env, home, _writable_with(policy, held))

    if _SIGNALS.stop:  # asked to end before anything was started: nothing is
        return 128 + _SIGNALS.stop
    init, runtime = init_argv(package_root())
    info_read, info_write = os.pipe()
    facts = _host_facts(policy, cwd, info_write, runtime, held, home)
    env, proxy_given = _program_environment(policy, env, facts, held)
    _make_home(policy, home)
    sandbox = _start_sandbox(bwrap, policy, (init, command), env, facts, outside,
                             proxy_given)
    return _wait_for_program(sandbox, policy, info_read, on_run, tuple(command))


def init_argv(packages: str) -> tuple[list[str], tuple[str, ...]]:
    """The sandbox's init as bubblewrap starts it, and the folders it needs besides our
    packages: the C init where bin/setup built it in `packages` (nothing else: it is
    static), else lnk_wrap.init, which does the same, and its interpreter's folders.
    Either refuses to run the program when a step fails: the fallback is as closed.
    A C init older than its source (a checkout updated, bin/setup not run again; by
    more than NATIVE_INIT_STALE_NS) is not run: it may lack what the source now does,
    which the Python init has."""
    from lnk_common.chain import helper_argv as chain_argv

    native = os.path.join(packages, *NATIVE_INIT)
    built: int | None = None
    try:
        built = os.stat(native).st_mtime_ns if os.access(native, os.X_OK) else None
        source = os.stat(native + ".c").st_mtime_ns
    except FileNotFoundError:  # no source beside it: an install that carries the program
        source = 0
    except OSError:  # gone since, or unreadable: the Python init
        built = None
    if built is not None and built >= source - NATIVE_INIT_STALE_NS:
        return [os.path.join(bwrap_plan.PACKAGES_INSIDE, *NATIVE_INIT)], ()
    init = chain_argv("init", inside=bwrap_plan.PACKAGES_INSIDE)
    return init, runtime_paths(init[0])


def _host_facts(policy: Policy, cwd: str, info_fd: int, runtime: tuple[str, ...],
                held: tuple[str, ...], home: homes.Choice) -> bwrap_plan.HostFacts:
    """What the mount plan needs of this machine; the working folder is / when the
    sandbox cannot see `cwd`, and every [commands] program must be seen."""
    from lnk_common.chain import package_root

    facts = gather(policy, cwd=cwd, info_fd=info_fd, runtime=runtime,
                   packages=package_root()).with_held(held).with_temporary_home(
                       home.path if home.temporary else "")
    if bwrap_plan.access_at(policy, facts, cwd) is None:
        # A harness or script often runs from a folder the sandbox is not given and names
        # what it touches by absolute path: say so in one line and start in / rather than
        # fail, so a relative path fails visibly instead of reaching the folder.
        print(f"lnk-sandbox: the working directory {cwd} is not readable in this sandbox "
              f"(not granted by {policy.spec or 'the policy'}); the program starts in /",
              file=sys.stderr)
        facts = facts.with_cwd("/")
    for path in (*policy.commands, *facts.loaders):
        if bwrap_plan.access_at(policy, facts, path) is None:
            raise LaunchError(
                f"{path} is in [commands] of {policy.spec or 'the policy'} but the sandbox "
                "cannot see it; grant a folder that holds it in [files] read"
            )
    return facts


def _program_environment(policy: Policy, env: dict[str, str], facts: bwrap_plan.HostFacts,
                         held: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """The program's environment (the verbs' variables in, the placeholders' variable
    and every tool's out, an unreadable trust file's variable out) and what the proxy
    is given in its own."""
    placeholder = ""
    if policy.models:
        env, placeholder = _model_environment(policy, env)
    # Never the placeholder's variable in the sandbox, whatever the caller's environment
    # held: the program's is its SDK's key variable. Nor any variable a tool's definition
    # names (its token's: lnk_wrap.verb_env), said when the caller's environment held one.
    from lnk_wrap.verb_env import VerbEnvError, without_tool_variables

    try:
        env, notes = without_tool_variables(env, policy.settings)
    except VerbEnvError as error:
        raise LaunchError(str(error)) from None
    for note in notes:
        _say(note)
    env = {name: value for name, value in env.items() if name != PLACEHOLDER_VARIABLE}
    proxy_given: dict[str, str] = {PLACEHOLDER_VARIABLE: placeholder} if placeholder else {}
    if policy.secrets or policy.has_url_secret():
        env = _secret_environment(policy, env, held, proxy_given)
    if policy.open_pages:
        env = _browser_environment(policy, env)
    # After the secrets' check: a run refused for a secret not set says that one line, not
    # a note about a trust variable first.
    return _unreachable_trust_dropped(env, policy, facts), proxy_given


def _model_environment(policy: Policy, env: dict[str, str]) -> tuple[dict[str, str], str]:
    """The program's environment points each named provider's SDK at the verb, with the
    placeholder for its key, and holds no provider's key (lnk_wrap.model_env); the proxy
    gets the placeholder in its own environment, never an argument."""
    from lnk_common.endpoints import PROXY_ADDRESS, PROXY_PORT
    from lnk_wrap import model_env

    try:
        placeholder = model_env.placeholder_for(policy)
    except model_env.ModelEnvError as error:
        raise LaunchError(str(error)) from None
    env, notes = model_env.sandbox_environment(
        env, policy.models, placeholder, proxy_address=PROXY_ADDRESS, proxy_port=PROXY_PORT)
    for note in notes:
        _say(note)
    for provider in model_env.keys_not_set(policy.settings, policy.models):
        _say(f"the model verb has no key for {provider} yet: its calls are refused until "
             f"you set one (its value on standard input: lnk-sandbox secret set "
             f"{provider})")
    return env, placeholder


def _secret_environment(policy: Policy, env: dict[str, str], held: tuple[str, ...],
                        proxy_given: dict[str, str]) -> dict[str, str]:
    """Each named secret's placeholder (of its rule's shape) and base URL, and the URL
    secret for `/_link/s/…`, in the program's environment; the proxy gets them in its
    own (lnk_wrap.verb_env), added to `proxy_given`."""
    from lnk_common.endpoints import PROXY_ADDRESS, PROXY_PORT
    from lnk_wrap import verb_env

    try:
        secret_placeholders = verb_env.secret_placeholders(policy)
        verb_env.check_tools(policy, _writable_with(policy, held))
        url_secret = verb_env.url_secret_for(policy) if policy.has_url_secret() else ""
        env = verb_env.sandbox_environment(
            env, placeholders=secret_placeholders, url_secret=url_secret,
            proxy_address=PROXY_ADDRESS, proxy_port=PROXY_PORT)
    except verb_env.VerbEnvError as error:
        raise LaunchError(str(error)) from None
    proxy_given.update(verb_env.proxy_environment(secret_placeholders, url_secret))
    return env


def _browser_environment(policy: Policy, env: dict[str, str]) -> dict[str, str]:
    """$BROWSER is ours, and so are the openers programs look for on PATH
    (lnk_wrap/browser): each asks the proxy to open the page outside."""
    from lnk_common.chain import package_root

    opener = os.path.join(package_root(), "lnk_wrap", "browser", "lnk-open")
    if not os.access(opener, os.X_OK):
        raise LaunchError(
            f"[verbs] open of {policy.spec or 'the policy'} needs the sandbox's browser, "
            f"{opener}, which is not built: run bin/setup (it needs a C compiler: "
            "apt-get install gcc libc6-dev)")
    return {**env, "BROWSER": bwrap_plan.BROWSER_INSIDE,
            "PATH": bwrap_plan.BROWSER_FOLDER_INSIDE + ":"
                    + env.get("PATH", "/usr/local/bin:/usr/bin:/bin")}


def _make_home(policy: Policy, home: homes.Choice) -> None:
    """HOME made once the run is sure to start (not before a refusal), and said."""
    from lnk_wrap.home import HomeError

    try:
        made = home.make()
    except HomeError as error:
        raise LaunchError(str(error)) from None
    if made:
        _say(f"HOME is {home.path}, the wire {policy.name}'s own (made now, "
             "kept across its runs; `lnk-sandbox check` shows it)")


class _Sandbox:
    """A started sandbox: bubblewrap's pid, its watch's, its ways out (if any), and the
    launcher's ends of the go-ahead's pipe and of the watch's word that the init is
    there."""

    __slots__ = ("child", "go_write", "ready", "watch", "wire")

    def __init__(self, child: int, watch: int, wire: _Wire | None, go_write: int,
                 ready: int) -> None:
        self.child = child
        self.watch = watch
        self.wire = wire
        self.go_write = go_write
        self.ready = ready


def _start_sandbox(bwrap: str, policy: Policy, inside: tuple[list[str], list[str]],
                   env: Mapping[str, str], facts: bwrap_plan.HostFacts, outside: Outside,
                   proxy_given: Mapping[str, str]) -> _Sandbox:
    """Start the ways out (if any), the watch, and then bubblewrap with `inside` (the
    init's argv and the command): the watch readies itself while bubblewrap makes the
    sandbox, and the init runs nothing before the watch has its listener. The watch
    comes first so that a launcher killed at any moment after bubblewrap starts leaves
    one that ends what bubblewrap left (lnk_wrap.leftovers)."""
    import _socket

    watch_end, init_end = (end.detach() for end in
                           _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM))
    facts = facts.with_watch(init_end)
    wire: _Wire | None = None
    if policy.has_wire():
        for note in outside.notes:
            _say(note)
        wire = _start_wire(policy, outside, proxy_given)
        facts = facts.with_data_files(wire.data_files).with_static_files(wire.static_files)
        go_read, go_write = wire.block_read, wire.block_write
    else:
        # Every sandbox waits for the go-ahead, with a wire or not: a stop signal that
        # comes before it means the program never starts.
        go_read, go_write = os.pipe()
    facts = facts.with_block(go_read)
    planned = bwrap_plan.plan(policy, facts)
    init, command = inside
    argv = [*planned.bwrap_argv(bwrap), "--", *init, *planned.init_args(), "--", *command]
    # Everything bubblewrap's start needs is made before the watch is forked: a page the
    # launcher writes between the fork and the spawn is a copy made on the start's path.
    given = [fd for fd in (facts.info_fd, facts.watch_fd, facts.block_fd,
                           *(fd for fd, _ in facts.data_files)) if fd is not None]
    for fd in given:
        os.set_inheritable(fd, True)
    # Bubblewrap is outside until it has made the sandbox: never a loader variable.
    bwrap_env = without_loader_variables(env)
    ready, ready_write = os.pipe()
    try:
        watch = _start_watch(policy, facts.loaders, outside, (watch_end, init_end),
                             ready_write)
    except OSError:
        # No watch, so no sandbox: its ends closed, nothing started.
        for fd in (*given, ready):
            os.close(fd)
        if wire is not None:
            wire.end()
        raise
    finally:
        os.close(watch_end)
        os.close(ready_write)
    try:
        child = _spawn_bubblewrap(argv, bwrap_env, given)
    except OSError:
        _end_helper(watch, None)  # the init's end closed under it: it ends at once
        os.close(ready)
        if wire is not None:
            wire.end()
        raise
    return _Sandbox(child, watch, wire, go_write, ready)


def _spawn_bubblewrap(argv: list[str], env: Mapping[str, str], given: list[int]) -> int:
    """Start bubblewrap with the environment `env` and the descriptors `given` (the
    plan's, made inheritable; inherited only by it, closed here after)."""
    try:
        # The signals this interpreter ignores for itself at its start are the
        # program's at their defaults again, as a shell or Python's subprocess gives
        # them: an ignored SIGPIPE passed on to the program made `yes | head -1` say
        # "Broken pipe" in every sandbox.
        return os.posix_spawn(argv[0], argv, env, setsigdef=PYTHON_IGNORED_SIGNALS)
    finally:
        for fd in given:
            os.close(fd)


def _wait_for_program(sandbox: _Sandbox, policy: Policy, info_read: int,
                      on_run: Callable[[Run], None] | None, command: tuple[str, ...]) -> int:
    """Make the ways out inside, give the go-ahead once the init is there (unless a stop
    signal came first), pass on the signals until bubblewrap ends, end the helpers, and
    return the program's exit status."""
    info = _read_info(info_read)
    sandbox_pid = info.get("child-pid")
    child, wire = sandbox.child, sandbox.wire
    run = None
    if wire is not None:
        _make_ways_out(sandbox, wire, sandbox_pid, info.get("net-namespace", 0))
        from lnk_wrap.runs import Run  # the run's first line on its wire's log

        run = Run(policy.settings, wire.name, command)
        run.start()
        if on_run is not None:
            on_run(run)
    # The program may start: its ways out exist (else no one reads it: a broken pipe).
    try:
        _wait_for_init(sandbox_pid, child, sandbox.ready)
    finally:
        os.close(sandbox.ready)
    stopped = _go_ahead_unless_stopped(sandbox.go_write, sandbox_pid)
    if run is not None:  # for `lnk-sandbox status`, once the program goes: no start waits
        run.keep_command()
    if stopped:
        _kill_sandbox(sandbox_pid, child)
    elif policy.network == "host":
        finish = _end_at_the_kill_switch(policy.settings, sandbox_pid, child)
        os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
        finish()  # so no pid it might kill is reused
    _, status = os.waitpid(child, 0)
    _end_helper(sandbox.watch, None)
    if wire is not None:
        wire.end()
    code = _exit_status(stopped, sandbox_pid, status)
    if run is not None:  # after the helpers' last ended lines
        run.end(code)
    return code


def _make_ways_out(sandbox: _Sandbox, wire: _Wire, sandbox_pid: int | None,
                   net_namespace: int) -> None:
    """The wire's sockets, made inside the sandbox's network (lnk_dns.helper). Never
    let the program start without them: on a failure the sandbox's own first process
    first (bubblewrap's inside one outlives an outer one killed), and the init, which
    waits for the go-ahead, refuses at the end of its pipe."""
    from lnk_dns.helper import HelperError, make_sockets

    try:
        if sandbox_pid is not None:
            make_sockets(sandbox_pid, net_namespace, wire.plan, wire.lan_addresses,
                         wire.channels)
    except HelperError as error:
        _kill_sandbox(sandbox_pid, sandbox.child)
        os.waitpid(sandbox.child, 0)
        os.close(sandbox.go_write)
        os.close(sandbox.ready)
        wire.end()
        raise LaunchError(str(error)) from None
    finally:
        for channel in wire.channels.values():
            os.close(channel)


def _exit_status(stopped: int, sandbox_pid: int | None, status: int) -> int:
    if stopped:
        return 128 + stopped
    if sandbox_pid is None:
        diagnosis = _diagnose_namespaces()
        print(f"lnk-sandbox: the sandbox could not be made{': ' + diagnosis if diagnosis else ''}",
              file=sys.stderr)
        return EXIT_SANDBOX_FAILED
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


# The watch ends by itself when the sandbox's last process is gone; one still there
# this long after bubblewrap has exited is stuck, and is killed.
WATCH_EXIT_SECONDS = 2.0


# The watch's name in ps, top and /proc/PID/comm (at most 15 bytes).
WATCH_PROCESS_NAME = b"lnk-watch"
_PR_SET_PDEATHSIG = 1


# Variables naming a file or folder of trusted CAs. A harness's may point where the sandbox
# cannot read (it is there for the proxy, outside): every SDK that reads one then fails
# to build its client (FileNotFoundError in the anthropic, openai and google-genai SDKs,
# even for a plain-HTTP base URL), so one the sandbox cannot read is not passed in.
TRUST_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                   "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH")


def _unreachable_trust_dropped(env: dict[str, str], policy: Policy,
                               facts: bwrap_plan.HostFacts) -> dict[str, str]:
    """`env` without the trust variables whose file the sandbox cannot read, said in one
    line (the proxy, outside, still gets them: it is started with the caller's own)."""
    dropped = [name for name in TRUST_VARIABLES
               if env.get(name) and bwrap_plan.access_at(
                   policy, facts, os.path.normpath(os.path.join(facts.cwd, env[name]))) is None]
    if not dropped:
        return env
    _say(f"{', '.join(dropped)} name{'s' if len(dropped) == 1 else ''} a file "
         "the sandbox cannot read; not passed in (the proxy outside still uses "
         f"{'it' if len(dropped) == 1 else 'them'})")
    return {name: value for name, value in env.items() if name not in dropped}


def _start_watch(policy: Policy, loaders: tuple[str, ...], outside: Outside,
                 ends: tuple[int, int], ready: int) -> int:
    """Start the sandbox's watch (lnk_execwatch.main says what it does) on the first of
    `ends`, a socket pair whose second end the init will have; it says on `ready` when
    it holds the init's listener. Return its pid.

    Every sandbox has one: it judges unix sockets, and with [commands] programs too. It
    is this launcher forked, not a new interpreter (lnk-sandbox-exec-watch is the same
    code for an administrator): a Python start is some 10 ms at every sandbox start, a
    fork well under one. It is forked just before bubblewrap starts, and readies
    itself while bubblewrap makes the sandbox: the init, whatever comes first, runs
    nothing before the watch has taken its listener and said so. Forked first, it costs
    the start a millisecond or so (docs/decisions/0001's last section): the price of
    a watch that outlives a launcher killed while bubblewrap makes the sandbox."""
    watch_end, init_end = ends
    init_inode = os.fstat(init_end).st_ino  # what the holders of the init's end hold
    launcher = os.getpid()
    pid = os.fork()
    if pid == 0:  # the watch: it never returns into the launcher's code
        code = 1
        try:
            _become_the_watch(outside, (watch_end, ready))
            code = _watch(_watch_argv(policy, loaders, watch_end),
                          (watch_end, init_inode), ready, launcher,
                          at_once=_watch_at_once(policy))
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        finally:
            os._exit(code)
    return pid


def _watch_argv(policy: Policy, loaders: tuple[str, ...], watch_end: int) -> list[str]:
    argv = ["--socket-fd", str(watch_end), *helper_argv(policy, "watch")]
    if policy.commands and not policy.learn:  # `learn` records every program instead
        if policy.open_pages:  # the sandbox's browser runs whatever [commands] lists
            from lnk_wrap.bwrap import BROWSER_FOLDER_INSIDE

            argv += ["--command", BROWSER_FOLDER_INSIDE]
        for path in loaders:
            argv += ["--loader", path]
    return argv


def _watch_at_once(policy: Policy) -> bool:
    """Where execs are handed over, the first call (the init's exec of the program) comes
    at once, and with a wire the program is there to call out: the watch readies itself
    right away, while the init goes on. Else it imports what judges a call only when
    one comes (which waits in the kernel meanwhile): a program that makes none, a
    build's compiler or a test run without a network, never pays for it."""
    return bool(policy.learn or policy.commands or policy.has_wire())


def _become_the_watch(outside: Outside, kept: tuple[int, int]) -> None:
    """The fork's own setting: its signals, session, environment, name and descriptors."""
    # The terminal's signals are the program's (the launcher passes them on); the watch
    # ends with the sandbox, or with the launcher.
    for signum in FORWARDED_SIGNALS:
        ignored = signum not in (signal.SIGWINCH, signal.SIGCONT)
        signal.signal(signum, signal.SIG_IGN if ignored else signal.SIG_DFL)
    if outside.own_session:  # a guest's terminal is not the watch's
        os.setsid()
    os.environ.clear()
    os.environ.update(outside.env)
    # Its name for ps and a person: /proc rather than prctl, which needs ctypes (3 ms).
    name = os.open("/proc/self/comm", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(name, WATCH_PROCESS_NAME)
    finally:
        os.close(name)
    low, high = sorted(kept)
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, 1 << 16)


def _watch(argv: list[str], channel: tuple[int, int], ready: int, launcher: int, *,
           at_once: bool) -> int:
    """Receive the init's listener and acknowledge it (the init waits for that), tell
    the launcher, then serve: at once, or (`at_once` false) from the first call handed
    over; returns at once when the sandbox ends, or the launcher, before any call. A
    launcher that ends before the init hands over its listener (killed outright while
    bubblewrap makes the sandbox) is one whose sandbox the watch ends: every process
    holding the init's end of `channel` (its socket and that end's inode). Nothing here
    imports ctypes before a call comes (the init sends the descriptors with
    SCM_RIGHTS: lnk_wrap.init._HandOver)."""
    watch_end = channel[0]
    # Until the watch proper asks the kernel to kill it with the launcher (PDEATHSIG,
    # which needs ctypes), the launcher's end is watched here.
    try:
        launcher_gone = os.pidfd_open(launcher)
    except ProcessLookupError:
        launcher_gone = -1
    if launcher_gone < 0 or os.getppid() != launcher:  # it ended before its pidfd was open
        return _end_the_unmade(channel)
    waiting = select.poll()
    waiting.register(watch_end, select.POLLIN)
    waiting.register(launcher_gone, select.POLLIN)
    if watch_end not in dict(waiting.poll()):  # the launcher ended first
        return _end_the_unmade(channel)
    from lnk_common.fdpass import receive_fds

    received = receive_fds(watch_end, 2)
    if received is None:  # the sandbox was never made: the init runs nothing
        return 0
    os.write(watch_end, b"+")
    os.close(watch_end)
    os.write(ready, b"+")  # the init exists (it sent these): the launcher's go-ahead may come
    os.close(ready)
    listener = received[0]
    if not at_once:
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(launcher_gone, select.POLLIN)
        events = dict(poller.poll())
        if events.get(launcher_gone) or events.get(listener, 0) & select.POLLHUP:
            return 0  # the launcher, or every process of the sandbox, is gone
    from lnk_common.syscalls import prctl

    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher:  # the launcher ended before PDEATHSIG was set
        return 1
    os.close(launcher_gone)
    from lnk_execwatch.main import main as watch_main

    watch_main(argv, (received[0], received[1]))
    return 0


def _end_the_unmade(channel: tuple[int, int]) -> int:
    """The launcher ended before the sandbox's init handed over: what bubblewrap made
    of the sandbox is ended (lnk_wrap.leftovers says why bubblewrap may leave it), or
    the watch says on its way out what it could not end."""
    from lnk_wrap.leftovers import SWEEP_SECONDS, end_holders

    watch_end, init_inode = channel
    if not end_holders(init_inode, watch_end):
        os.write(2, f"lnk-sandbox: the launcher was killed while it made the sandbox, and "
                    f"a process of that sandbox outlived {SWEEP_SECONDS:g} s of the watch's "
                    f"kills; find it with: ls -l /proc/*/fd | grep 'socket:\\[{init_inode}\\]'"
                    "\n".encode())
    return 1


def _end_helper(pid: int, first: int | None) -> None:
    """Wait for a helper to end (sending it `first`, if any), killing it if it takes
    longer than WATCH_EXIT_SECONDS. Waited on through a pidfd: woken the moment it ends,
    not at the next look (every sandbox's end waits for its watch)."""
    if first is not None:
        try:  # noqa: SIM105
            os.kill(pid, first)
        except ProcessLookupError:
            pass
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        os.waitpid(pid, 0)
        return
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(int(WATCH_EXIT_SECONDS * 1000)):
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    os.waitpid(pid, 0)


class _Wire:
    """A run's ways out: the helpers serving them (pids), the launcher's ends of their
    channels, the sockets to make inside, the DNS files, and the block pipe."""

    def __init__(self) -> None:
        self.name = ""  # the wire's name (its log, its window, its pause)
        self.pids: list[int] = []
        self.channels: dict[str, int] = {}
        self.plan: list[Listener] = []
        self.lan_addresses: list[str] = []
        self.data_files: tuple[tuple[int, str], ...] = ()
        self.static_files: tuple[tuple[str, str], ...] = ()
        self.block_read, self.block_write = os.pipe()

    def end(self) -> None:
        for pid in self.pids:
            _end_helper(pid, signal.SIGTERM)
        self.pids = []


def _start_wire(policy: Policy, outside: Outside, proxy_given: Mapping[str, str]
                ) -> _Wire:
    """Start what serves the run's ways out (the proxy for its port, DNS, endpoints and
    [lan]; the relay for [localhost] ports), outside, in this machine's network; plan
    the sockets the DNS helper makes inside once bubblewrap has made the network."""
    from lnk_common import endpoints

    try:
        # The proxy's own port is planned for the model verb too, even with network
        # "none": then it serves verbs only.
        plan = endpoints.listeners(
            proxy=policy.has_proxy_port(), endpoints=policy.endpoints, lan=policy.lan,
            localhost_ports=(*policy.localhost_ports, *policy.local_models),
            callbacks=policy.open_pages)
        entries = endpoints.entries(policy.endpoints, policy.lan)
    except endpoints.EndpointError as error:
        raise LaunchError(str(error)) from None
    wire = _Wire()
    wire.plan = plan
    wire.lan_addresses = endpoints.lan_addresses(entries)
    name = wire.name = policy.name or _own_wire()
    dns = endpoints.has_dns(entries)
    # The proxy's network without DNS of its own: a resolv.conf naming 127.0.0.1, where
    # the proxy serves DNS once `lnk-sandbox allow --tcp` adds an endpoint (until then
    # nothing listens there: a lookup is refused at once). lnk_wrap.dns_files.
    later = policy.network == "proxy" and not dns
    try:
        if policy.needs_proxy():
            options = ["--wire", name, *helper_argv(policy, "proxy")]
            if outside.guest:  # its questions name the guest
                options += ["--guest", outside.guest]
            if later:
                options += ["--dns", "later"]
            # The placeholders and the URL secret: in its environment, never an argument.
            proxy_env = {**outside.env, **proxy_given}
            pid, channel = _start_served("proxy", policy, options, proxy_env,
                                         outside.own_session)
            wire.pids.append(pid)
            wire.channels["proxy"] = channel
        if policy.localhost_ports or policy.local_models:
            relay_options = ["--wire", name, *helper_argv(policy, "relay")]
            pid, channel = _start_served("relay", policy, relay_options, outside.env,
                                         outside.own_session)
            wire.pids.append(pid)
            wire.channels["relay"] = channel
        if dns:
            from lnk_wrap.dns_files import data_files

            wire.data_files = data_files()
        elif later:
            wire.static_files = _later_files()
    except BaseException:
        wire.end()
        for fd in (*wire.channels.values(), wire.block_read, wire.block_write):
            os.close(fd)
        raise
    return wire


def _later_files() -> tuple[tuple[str, str], ...]:
    """(file of this package, path inside) for a sandbox whose DNS comes only with an
    added endpoint: the package's resolv.conf naming 127.0.0.1 (lnk_wrap/resolv.conf,
    lnk_wrap.dns_files says why), where the system's really is (a link followed; none:
    nothing, glibc asks 127.0.0.1 anyway). Here, not in lnk_wrap.dns_files: importing
    that module cost a start some 150 µs, this function some 12 µs."""
    if not os.path.lexists("/etc/resolv.conf"):
        return ()
    package = os.path.dirname(os.path.abspath(__file__))
    return ((os.path.join(package, "resolv.conf"), os.path.realpath("/etc/resolv.conf")),)


def _start_served(helper: str, policy: Policy, options: list[str],
                  env: Mapping[str, str], own_session: bool) -> tuple[int, int]:
    """Start lnk-sandbox-proxy or lnk-sandbox-relay, outside; return its pid and the
    launcher's end of the socket pair its listening sockets will be sent over (one
    labelled descriptor a message)."""
    import _socket

    from lnk_common.chain import helper_argv

    served_end, launcher_end = (end.detach() for end in
                                _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET))
    start = helper_argv(helper)
    # Both read the wire's JSON files (the pause, the window) with orjson; the relay
    # without it could not see a pause (its watch thread died on the import).
    if policy.site_packages and helper in ("proxy", "relay"):
        start[4:4] = ["--site-packages", policy.site_packages]
    argv = [*start, "--socket-fd", str(served_end), *options]
    return (_spawn_helper(argv, env, given=served_end, kept=launcher_end,
                          own_session=own_session), launcher_end)


def _spawn_helper(argv: list[str], env: Mapping[str, str], *, given: int, kept: int,
                  own_session: bool) -> int:
    """Start a helper that inherits `given` (one end of a socket pair; closed here after)
    and not `kept` (the other end, closed here if the helper cannot start).
    `own_session` (a guest's): in a session of its own, so with no controlling terminal
    (a question's /dev/tty cannot be opened: nothing it asks reaches the guest's
    terminal), and reading nothing the guest types (its input is /dev/null)."""
    os.set_inheritable(given, True)
    try:
        if own_session:
            return os.posix_spawn(argv[0], argv, dict(env), setsid=True, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
        return os.posix_spawn(argv[0], argv, dict(env))
    except OSError:
        os.close(kept)
        raise
    finally:
        os.close(given)


def _own_wire() -> str:
    """A run whose spec names no wire is a wire of its own: its log, its window and its
    pause are its own, and a pause ends with it (a named wire's outlives its runs)."""
    return f"run-{os.urandom(4).hex()}"
def _diagnose_namespaces() -> str:
    """Why bubblewrap could not make a user namespace, with the fix, in one line."""
    checks = (
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
         "AppArmor refuses user namespaces to unconfined programs (Ubuntu 23.10+); allow bwrap "
         "with an AppArmor profile, or: sysctl kernel.apparmor_restrict_unprivileged_userns=0"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0",
         "unprivileged user namespaces are off; sysctl kernel.unprivileged_userns_clone=1"),
        ("/proc/sys/user/max_user_namespaces", "0",
         "user namespaces are off; sysctl user.max_user_namespaces=15000"),
    )
    for path, bad, advice in checks:
        try:
            with open(path) as handle:
                if handle.read().strip() == bad and not (bad == "1" and os.geteuid() == 0):
                    return advice
        except OSError:
            continue
    return ""


def check_install(policy: Policy) -> None:
    """Refuse a line (kept by a harness, maybe for long) whose install has changed under
    it: a helper's module gone, or the folder of libraries it names (an editable
    install's venv, for the proxy's h11). Some stats, before anything is made."""
    from lnk_common.chain import missing_helpers, package_root
    from lnk_wrap.helpers import ASK_WRAP_AGAIN

    gone = missing_helpers()
    if gone:
        raise LaunchError(f"the install this line names, {package_root()}, no longer has its "
                          f"{', '.join(gone)} (removed or changed since){ASK_WRAP_AGAIN}")
    if policy.site_packages and not os.path.isdir(policy.site_packages):
        raise LaunchError(f"the libraries this line names, {policy.site_packages}, are gone "
                          f"(moved or removed){ASK_WRAP_AGAIN}")


def main(argv: list[str] | None = None) -> None:
    record_signals()
    arguments = sys.argv[1:] if argv is None else argv
    try:
        options, command = split_argv(arguments)
        policy = Policy.from_argv(options)
        check_install(policy)
        if policy.site_packages and policy.site_packages not in sys.path:
            # The line `wrap` prints runs without `site` (-I -S): the verbs' start reads
            # a secret's rule with orjson. Last on the path, so nothing of the standard
            # library is looked for there first.
            sys.path.append(policy.site_packages)
        code = launch(policy, command, os.environ)
    except (PolicyArgvError, LaunchError) as error:
        print(f"lnk-sandbox: {error}", file=sys.stderr)
        code = EXIT_SANDBOX_FAILED
    except OSError as error:
        print(f"lnk-sandbox: cannot start the sandbox: {error}", file=sys.stderr)
        code = EXIT_SANDBOX_FAILED
    _exit_at_once(code)


def _exit_at_once(code: int) -> None:
    """End this process without the interpreter's finalization: tearing down its modules
    took some 2 ms of CPU at every sandbox's end, which the harness waits for, and this
    launcher leaves nothing that needs it (its helpers are ended, its files closed or
    removed). What it printed is flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib is one more import at every start)
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stream: nothing more can be said on it
    os._exit(code)


if __name__ == "__main__":
    main()
