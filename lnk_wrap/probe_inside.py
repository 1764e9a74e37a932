"""The escape attempts of `lnk-sandbox check --probe`: the program run inside the sandbox.

Job: try each way out of PROBES once, from inside a real sandbox, and write one JSON line
per probe to the report file: its name, whether it held, and what was seen (an errno,
a status, what came back). lnk_wrap.probe made the sandbox, the targets and the spec,
and reads the report; it holds a row no line came for as not held (fail closed), and a
witness outside (a listening socket that logs who connects) overrules a line that says
held.

Run as `python -I -S probe_inside.py ARGUMENTS-FILE` by the system's interpreter, as the
sandbox runs any program: standard library only, no import of ours (the package is not
on its path). The arguments come as a JSON file in the granted folder (paths and ports,
no secret).

Order: the controls first (what must work, or every "held" below would mean nothing: a
granted file is read, a listed program runs, a socket made inside is reached, the proxy
answers); then the probes in the table's order, the metadata service last (a try at it
pauses the wire, after which every call is refused by the pause, not by the rule under
test). A probe that raises is reported with the exception and counted not held.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import subprocess
import sys
import time

__all__ = ["CONTROLS", "PROBES", "main"]

# name, what it tries, what "held" means. The table the report is read against.
PROBES = (
    ("files-outside", "read a file in a folder beside the granted one",
     "the file cannot be opened"),
    ("machine-secrets", "read /etc/shadow (hidden in every sandbox)",
     "the file cannot be opened"),
    ("read-only-grant", "write a file in a folder granted read only",
     "the file cannot be made"),
    ("hidden-folder", "read a file in a hidden folder inside the read grant",
     "the file cannot be opened"),
    ("settings-folder", "read a file in Link's settings folder, and list it",
     "neither the file nor the folder's entries are seen"),
    ("dot-files", "write .envrc and .git/config at the top of the written folder, and "
     "replace and remove .envrc", "none of it can be done"),
    ("links-out", "read the file beside the granted folder and the settings canary through "
     "symbolic links made in the written folder, and hard-link the hidden file there",
     "nothing is read, and no link is made"),
    ("unlisted-program", "run /usr/bin/id, which [commands] does not list",
     "it does not start"),
    ("execveat", "run a listed program by file descriptor (execveat, AT_EMPTY_PATH)",
     "it does not start"),
    ("memory-file", "write a program into a memory file (memfd) and run it",
     "it does not start"),
    ("unix-socket-outside", "connect to a unix socket made outside, in the granted folder",
     "the connection is refused, and nothing reaches the socket"),
    ("abstract-socket-outside", "connect to an abstract unix socket made outside",
     "the connection is refused"),
    ("direct-network", "connect to this machine's address and a public address directly",
     "no connection is made"),
    ("this-machine-by-proxy", "CONNECT through the proxy to this machine (loopback, "
     "localhost and its own address, each listed in hosts)",
     "the proxy answers 403, and nothing reaches the listener outside"),
    ("refused-host", "CONNECT through the proxy to a name not in hosts",
     "the proxy answers 403"),
    ("socket-families", "open vsock, packet, bluetooth, alg, key, xdp, audit netlink and "
     "raw IP sockets", "none opens"),
    ("refused-calls", "unshare a user namespace, mount, ptrace, bpf, perf_event_open, "
     "keyctl and io_uring_setup, in a child", "each fails with an error, and the child is "
     "not killed"),
    ("capabilities", "read the capabilities the program holds (/proc/self/status)",
     "none: effective, permitted and bounding sets empty"),
    ("process-outside", "signal the process that started the sandbox (kill 0)",
     "no such process is seen"),
    ("metadata-by-proxy", "GET the cloud metadata service through the proxy",
     "the proxy answers 403"),
)
CONTROLS = (
    ("control-read", "read the granted canary file", "it is read"),
    ("control-program", "run the listed interpreter", "it runs"),
    ("control-socket", "connect to a unix socket made inside the written folder",
     "the connection is made"),
    ("control-proxy", "reach the proxy", "it answers"),
)

# A probe waits this long for a connection or an answer: the proxy is on the sandbox's
# own loopback; a wait past this is a refusal that never came, and is said.
WAIT_SECONDS = 10.0
# A refusal's answer is a head and one line (lnk_common.wire.refusal_head); read no more.
_ANSWER_BYTES = 4096
_AT_EMPTY_PATH = 0x1000
_MFD_CLOEXEC = 0x1
# The two architectures the seccomp filter is built for (lnk_common.arch has the tables;
# this program imports nothing of ours). The refused calls' arguments are harmless ones.
_SYSCALLS = {"x86_64": {"execveat": 322, "memfd_create": 319, "unshare": 272, "mount": 165,
                        "ptrace": 101, "bpf": 321, "perf_event_open": 298, "keyctl": 250,
                        "io_uring_setup": 425},
             "aarch64": {"execveat": 281, "memfd_create": 279, "unshare": 97, "mount": 40,
                         "ptrace": 117, "bpf": 280, "perf_event_open": 241, "keyctl": 219,
                         "io_uring_setup": 425}}
_CLONE_NEWUSER = 0x10000000
_PTRACE_ATTACH = 16
# The families no sandbox gets (lnk_wrap.seccomp_filter.SOCKET_FAMILIES lists the
# allowed): (name, family, type, protocol).
_FAMILIES = (("vsock", 40, socket.SOCK_STREAM, 0), ("packet", 17, socket.SOCK_RAW, 0),
             ("bluetooth", 31, socket.SOCK_STREAM, 0), ("alg", 38, socket.SOCK_SEQPACKET, 0),
             ("key", 15, socket.SOCK_RAW, 2), ("xdp", 44, socket.SOCK_RAW, 0),
             ("netlink-audit", 16, socket.SOCK_RAW, 9),
             ("raw-ip", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))


def _errno(error: OSError) -> str:
    return f"{errno.errorcode.get(error.errno or 0, error.errno)}: {error.strerror}"


def _cannot_open(path: str) -> tuple[bool, str]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(64)
    except OSError as error:
        return True, _errno(error)
    return False, f"read {len(data)} bytes"


def _cannot_make(path: str) -> tuple[bool, str]:
    try:
        with open(path, "ab") as handle:
            handle.write(b"# lnk-sandbox probe\n")
    except OSError as error:
        return True, _errno(error)
    return False, "written"


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _in_child(body: object) -> tuple[bool, str]:
    """Run `body` (a function that execs or returns an errno) in a child: held unless the
    program it starts ran (exit 42, the listed interpreter's answer)."""
    pid = os.fork()
    if pid == 0:
        try:
            code = body()  # type: ignore[operator]
        except OSError as error:
            code = error.errno or 98
        except BaseException:
            code = 99
        os._exit(min(int(code or 98), 99))
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 42:
        return False, "it ran"
    return True, (errno.errorcode.get(code, f"status {code}") if 0 < code < 98
                  else f"status {code}")


_RAN = [sys.executable, "-I", "-S", "-c", "raise SystemExit(42)"]


def files_outside(args: dict[str, object]) -> tuple[bool, str]:
    return _cannot_open(str(args["outside_file"]))


def machine_secrets(args: dict[str, object]) -> tuple[bool, str]:
    return _cannot_open("/etc/shadow")


def read_only_grant(args: dict[str, object]) -> tuple[bool, str]:
    return _cannot_make(os.path.join(str(args["granted"]), "made-by-probe"))


def hidden_folder(args: dict[str, object]) -> tuple[bool, str]:
    return _cannot_open(str(args["hidden_file"]))


def settings_folder(args: dict[str, object]) -> tuple[bool, str]:
    held, saw = _cannot_open(str(args["settings_file"]))
    try:
        entries = os.listdir(str(args["settings"]))
    except OSError as error:
        return held, f"{saw}; listing: {_errno(error)}"
    return held and not entries, f"{saw}; listing: {len(entries)} entries"


def _cannot_replace(path: str) -> tuple[bool, str]:
    """Rename a new file over `path`, then remove it: a held file is a mount point."""
    beside = path + ".probe"
    try:
        with open(beside, "w") as handle:
            handle.write("# lnk-sandbox probe\n")
    except OSError as error:
        return True, f"replace: {_errno(error)}"
    try:
        os.replace(beside, path)
    except OSError as error:
        os.unlink(beside)
        replaced = f"replace: {_errno(error)}"
    else:
        return False, "replaced"
    try:
        os.unlink(path)
    except OSError as error:
        return True, f"{replaced}; remove: {_errno(error)}"
    return False, f"{replaced}; removed"


def dot_files(args: dict[str, object]) -> tuple[bool, str]:
    work = str(args["work"])
    seen = [_cannot_make(os.path.join(work, name)) for name in (".envrc", ".git/config")]
    seen.append(_cannot_replace(os.path.join(work, ".envrc")))
    return all(held for held, _ in seen), "; ".join(saw for _, saw in seen)


def links_out(args: dict[str, object]) -> tuple[bool, str]:
    work = str(args["work"])
    seen = []
    for name, target in (("to-outside", str(args["outside_file"])),
                         ("to-settings", str(args["settings_file"]))):
        link = os.path.join(work, name)
        try:
            os.symlink(target, link)
        except OSError as error:
            seen.append((True, f"{name}: {_errno(error)}"))
            continue
        held, saw = _cannot_open(link)
        seen.append((held, f"{name}: {saw}"))
    try:
        os.link(str(args["hidden_file"]), os.path.join(work, "hidden-link"))
    except OSError as error:
        seen.append((True, f"hard link: {_errno(error)}"))
    else:
        seen.append((False, "hard link: made"))
    return all(held for held, _ in seen), "; ".join(saw for _, saw in seen)


def _refused_calls() -> int:
    """In the child: each refused call once; the first that succeeds is its exit status
    (its index + 1), none: 0 (a child killed by the filter says so by its signal)."""
    numbers = _SYSCALLS[os.uname().machine]
    libc = _libc()
    tries = ((numbers["unshare"], _CLONE_NEWUSER, 0, 0, 0, 0),
             (numbers["mount"], b"none", b"/tmp", b"tmpfs", 0, 0),
             (numbers["ptrace"], _PTRACE_ATTACH, 1, 0, 0, 0),
             (numbers["bpf"], 0, 0, 0, 0, 0),
             (numbers["perf_event_open"], 0, 0, -1, -1, 0),
             (numbers["keyctl"], 0, -3, 0, 0, 0),  # KEYCTL_GET_KEYRING_ID, the user's
             (numbers["io_uring_setup"], 1, 0, 0, 0, 0))
    for index, (number, *arguments) in enumerate(tries):
        if libc.syscall(number, *arguments) >= 0:
            return index + 1
    return 0


def refused_calls(args: dict[str, object]) -> tuple[bool, str]:
    if os.uname().machine not in _SYSCALLS:
        return False, f"no call numbers for {os.uname().machine}: not tried"
    pid = os.fork()
    if pid == 0:
        try:
            code = _refused_calls()
        except BaseException:
            code = 99
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return False, f"the child was killed by signal {os.WTERMSIG(status)}"
    code = os.WEXITSTATUS(status)
    names = ("unshare", "mount", "ptrace", "bpf", "perf_event_open", "keyctl",
             "io_uring_setup")
    if code == 0:
        return True, "each failed with an error"
    return False, (f"{names[code - 1]} succeeded" if code <= len(names)
                   else "the child failed before trying")


def capabilities(args: dict[str, object]) -> tuple[bool, str]:
    with open("/proc/self/status") as handle:
        sets = {key: value.strip() for key, _, value in
                (line.partition(":") for line in handle) if key in ("CapEff", "CapPrm", "CapBnd")}
    held = len(sets) == 3 and all(int(value, 16) == 0 for value in sets.values())
    return held, ", ".join(f"{key} {value}" for key, value in sorted(sets.items()))


def unlisted_program(args: dict[str, object]) -> tuple[bool, str]:
    try:
        done = subprocess.run(["/usr/bin/id"], capture_output=True, timeout=WAIT_SECONDS,
                              check=False)
    except FileNotFoundError:
        return False, "no /usr/bin/id to try: not tried"  # a wall not tried did not hold
    except OSError as error:
        return True, _errno(error)
    return False, f"it ran (status {done.returncode})"


def execveat(args: dict[str, object]) -> tuple[bool, str]:
    number = _SYSCALLS.get(os.uname().machine, {}).get("execveat")
    if number is None:
        return True, "no execveat on this architecture"

    def run() -> int:
        fd = os.open(sys.executable, os.O_RDONLY)
        argv = (ctypes.c_char_p * (len(_RAN) + 1))(*[word.encode() for word in _RAN], None)
        envp = (ctypes.c_char_p * 1)(None)
        libc = _libc()
        libc.syscall(number, fd, b"", argv, envp, _AT_EMPTY_PATH)
        return ctypes.get_errno()

    return _in_child(run)


def memory_file(args: dict[str, object]) -> tuple[bool, str]:
    number = _SYSCALLS.get(os.uname().machine, {}).get("memfd_create")
    if number is None:
        return True, "no memfd_create on this architecture"
    libc = _libc()
    fd = libc.syscall(number, b"lnk-probe", 0)  # without MFD_CLOEXEC: the child runs it
    if fd < 0:
        return True, f"memfd_create: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    try:
        with open(sys.executable, "rb") as program:
            os.write(fd, program.read())
        path = f"/proc/self/fd/{fd}"
        # The program's own memory file, run as a file: what the exec watch must refuse.
        return _in_child(lambda: os.execv(path, [path, *_RAN[1:]]))  # noqa: S606
    except OSError as error:
        return True, _errno(error)
    finally:
        os.close(fd)


def _connect_unix(address: str | bytes) -> tuple[bool, str]:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(WAIT_SECONDS)
    try:
        client.connect(address)
    except OSError as error:
        return True, _errno(error)
    finally:
        client.close()
    return False, "connected"


def unix_socket_outside(args: dict[str, object]) -> tuple[bool, str]:
    return _connect_unix(str(args["outside_socket"]))


def abstract_socket_outside(args: dict[str, object]) -> tuple[bool, str]:
    return _connect_unix(b"\0" + str(args["abstract_name"]).encode())


def direct_network(args: dict[str, object]) -> tuple[bool, str]:
    seen = []
    for host in (*args["machine_addresses"], "192.0.2.1"):  # type: ignore[misc]
        try:
            socket.create_connection((str(host), int(args["port"])),  # type: ignore[call-overload]
                                     timeout=WAIT_SECONDS).close()
        except OSError as error:
            seen.append((True, f"{host}: {_errno(error)}"))
        else:
            seen.append((False, f"{host}: connected"))
    return all(held for held, _ in seen), "; ".join(saw for _, saw in seen)


def _through_proxy(head: str) -> str:
    """The proxy's status line and its refusal's one line for `head`, or what failed."""
    proxy = os.environ.get("HTTP_PROXY", "")
    host, _, port = proxy.removeprefix("http://").rstrip("/").rpartition(":")
    if not port.isdigit():
        return "no proxy in HTTP_PROXY"
    answer = b""
    try:
        with socket.create_connection((host, int(port)), timeout=WAIT_SECONDS) as client:
            client.sendall(head.encode())
            while len(answer) < _ANSWER_BYTES and (chunk := client.recv(4096)):
                answer += chunk
    except OSError as error:
        if not answer:
            return _errno(error)
    status, _, rest = answer.partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2].split(b"\n", 1)[0]
    return f"{status.decode('latin-1')} ({body.decode('utf-8', 'replace')})"


def _refused_for(status: str, reason: str) -> tuple[bool, str]:
    """Held: the proxy answered 403 for `reason` (not for another, as a pause's)."""
    return status.startswith("HTTP/1.1 403 ") and reason in status, status


def this_machine_by_proxy(args: dict[str, object]) -> tuple[bool, str]:
    seen = []
    for host in args["proxy_targets"]:  # type: ignore[attr-defined]
        target = f"{host}:{args['port']}"
        held, status = _refused_for(_through_proxy(f"CONNECT {target} HTTP/1.1\r\n"
                                                   f"Host: {target}\r\n\r\n"), "this machine")
        seen.append((held, f"{target}: {status}"))
    return all(held for held, _ in seen), "; ".join(saw for _, saw in seen)


def refused_host(args: dict[str, object]) -> tuple[bool, str]:
    return _refused_for(_through_proxy("CONNECT not-listed.example.com:443 HTTP/1.1\r\n"
                                       "Host: not-listed.example.com:443\r\n\r\n"),
                        "is not in this sandbox's hosts")


def socket_families(args: dict[str, object]) -> tuple[bool, str]:
    opened = []
    for name, family, kind, protocol in _FAMILIES:
        try:
            socket.socket(family, kind, protocol).close()
        except OSError:
            continue
        opened.append(name)
    return not opened, ("opened: " + ", ".join(opened)) if opened else "none opened"


def process_outside(args: dict[str, object]) -> tuple[bool, str]:
    try:
        os.kill(int(args["outside_pid"]), 0)  # type: ignore[call-overload]
    except OSError as error:
        return error.errno == errno.ESRCH, _errno(error)
    return False, "a process of that number is there"


def metadata_by_proxy(args: dict[str, object]) -> tuple[bool, str]:
    return _refused_for(_through_proxy("GET http://169.254.169.254/latest/meta-data/ "
                                       "HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"),
                        "is a cloud metadata service")


def control_read(args: dict[str, object]) -> tuple[bool, str]:
    held, saw = _cannot_open(str(args["canary"]))
    return not held, saw


def control_program(args: dict[str, object]) -> tuple[bool, str]:
    done = subprocess.run(_RAN, capture_output=True, timeout=WAIT_SECONDS, check=False)
    return done.returncode == 42, f"status {done.returncode}"


def control_socket(args: dict[str, object]) -> tuple[bool, str]:
    path = os.path.join(str(args["work"]), "inside.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
        server.listen(1)
        held, saw = _connect_unix(path)
        return not held, saw
    finally:
        server.close()
        os.unlink(path)


def control_proxy(args: dict[str, object]) -> tuple[bool, str]:
    status = _through_proxy("CONNECT not-listed.example.com:443 HTTP/1.1\r\n"
                            "Host: not-listed.example.com:443\r\n\r\n")
    return status.startswith("HTTP/1.1 "), status


# Each row's attempt, by its name in CONTROLS and PROBES: named here, not looked up in
# the module's globals, so that only these run; a row with no attempt fails as a probe
# that broke (not held).
ATTEMPTS = {
    "files_outside": files_outside,
    "machine_secrets": machine_secrets,
    "read_only_grant": read_only_grant,
    "hidden_folder": hidden_folder,
    "settings_folder": settings_folder,
    "dot_files": dot_files,
    "links_out": links_out,
    "refused_calls": refused_calls,
    "capabilities": capabilities,
    "unlisted_program": unlisted_program,
    "execveat": execveat,
    "memory_file": memory_file,
    "unix_socket_outside": unix_socket_outside,
    "abstract_socket_outside": abstract_socket_outside,
    "direct_network": direct_network,
    "this_machine_by_proxy": this_machine_by_proxy,
    "refused_host": refused_host,
    "socket_families": socket_families,
    "process_outside": process_outside,
    "metadata_by_proxy": metadata_by_proxy,
    "control_read": control_read,
    "control_program": control_program,
    "control_socket": control_socket,
    "control_proxy": control_proxy,
}


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as handle:
        args = json.load(handle)
    with open(str(args["report"]), "a", encoding="utf-8") as report:
        for name, _, _ in (*CONTROLS, *PROBES):
            started = time.monotonic()
            try:
                held, saw = ATTEMPTS[name.replace("-", "_")](args)
            except Exception as error:  # a probe that breaks: said, and not held
                held, saw = False, f"the probe failed: {type(error).__name__}: {error}"
            report.write(json.dumps({"name": name, "held": bool(held), "saw": saw,
                                     "seconds": round(time.monotonic() - started, 3)}) + "\n")
            report.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
