"""lnk-sandbox check: what this machine gives, what is therefore in force, what is open.

Every fact is found by trying it (run bubblewrap with a user namespace, ask the kernel
for its Landlock ABI, make a sealed memory file), not by reading version numbers, so
the report says what a sandbox started now would get. The stated gaps are listed as
open whatever the machine: they are limits of the design, not of this machine.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Mapping
from typing import Any

from lnk_common import arch
from lnk_common.arch import number
from lnk_common.policy import Policy
from lnk_common.settings import SettingsError, settings_folder
from lnk_wrap import landlock, standins
from lnk_wrap.launch import LaunchError, _diagnose_namespaces, find_bwrap
from lnk_wrap.seccomp_filter import NETLINK_PROTOCOLS, SOCKET_FAMILIES

__all__ = ["STATED_GAPS", "report", "show"]

_MFD_CLOEXEC = 0x1
_MFD_NOEXEC_SEAL = 0x8
_SYS_MEMFD_CREATE = number("memfd_create")
_PR_GET_SECCOMP = 21

# Limits of the design, each from the seed, reported as open on every machine.
STATED_GAPS = (
    {"gap": "loader", "open": True,
     "why": "the loader must stay runnable where programs are listed, so a program can "
            "hand it any file it can read (ld.so ./x)"},
    {"gap": "LD_PRELOAD", "open": True,
     "why": "the loader's injection variables are cleared at start, but a program can set "
            "LD_PRELOAD again for a child it runs"},
    {"gap": "interpreters", "open": True,
     "why": "[commands] limits which files start, not what an interpreter is told to do: "
            "a listed interpreter runs any code"},
    {"gap": "project files a hook runs", "open": True,
     "why": "dot files are held, but a hook or hook manager that runs the project's own "
            "files (a script, package.json's scripts) runs what the sandbox may write, as "
            "building the project would"},
    {"gap": "dot files below the top", "open": True,
     "why": "only the top of a written folder is held: a repository the sandbox clones or "
            "makes inside is its work, and running git there runs its settings"},
    {"gap": "a new .envrc", "open": True,
     "why": "a missing .envrc can be made on Linux; direnv runs it only after you allow it"},
    {"gap": "asking on a shared terminal", "open": True,
     "why": "a program on the terminal a question is asked on can redraw the question's "
            "line (never the code it does not see) or swallow the code typed; the dialog "
            "and `lnk-sandbox asks` show the real question, and a swallowed code is no"},
)


def _browser_built() -> bool:
    from lnk_common.chain import package_root

    return os.access(os.path.join(package_root(), "lnk_wrap", "browser", "lnk-open"), os.X_OK)


def _bubblewrap(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        path = find_bwrap(env)
    except LaunchError as error:
        return {"found": False, "why": str(error)}
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    trial = subprocess.run(
        [path, "--unshare-user", "--unshare-pid", "--unshare-net", "--cap-drop", "ALL",
         "--die-with-parent", "--ro-bind", "/", "/", "--", "/bin/true"],
        capture_output=True, text=True, check=False,
    )
    namespaces = trial.returncode == 0
    found: dict[str, Any] = {
        "found": True,
        "path": path,
        "version": version.stdout.strip().removeprefix("bubblewrap "),
        "user_namespaces": namespaces,
    }
    if not namespaces:
        found["why"] = _diagnose_namespaces() or trial.stderr.strip().splitlines()[-1:]
    return found


def _seccomp() -> dict[str, Any]:
    libc = ctypes.CDLL(None, use_errno=True)
    mode = libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0)
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail") as handle:
            actions = handle.read().split()
    except OSError:
        actions = []
    return {"available": mode >= 0, "user_notification": "user_notif" in actions,
            "actions": actions}


def _memfd_noexec() -> bool:
    """Linux 6.3+: a memory file can be sealed non-executable (MFD_NOEXEC_SEAL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(_SYS_MEMFD_CREATE, b"lnk-check", _MFD_CLOEXEC | _MFD_NOEXEC_SEAL)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _model_verb(settings: str | None, policy: Policy | None) -> dict[str, Any]:
    """Which providers' keys Link's secrets hold (names only, never a value), and with a
    spec: which model verbs it turns on, which of those have no key yet, and whether
    server-side tools are kept."""
    from lnk_common.policy import MODEL_PROVIDERS
    from lnk_common.secrets import SecretError, list_secrets

    try:
        stored = set(list_secrets(settings)) if settings else set()
        secrets_error = ""
    except SecretError as error:
        stored, secrets_error = set(), str(error)
    found: dict[str, Any] = {
        "providers": list(MODEL_PROVIDERS),
        "keys_set": [provider for provider in MODEL_PROVIDERS if provider in stored],
    }
    if secrets_error:
        found["secrets_error"] = secrets_error
    if policy is not None:
        found["spec"] = policy.spec
        found["on"] = list(policy.models)
        found["no_key_yet"] = [provider for provider in policy.models if provider not in stored]
        found["server_tools"] = policy.server_tools
    return found


def _socket_families() -> str:
    """One line from the filter's own tables, so check cannot say other than it does."""
    families = ", ".join(name.split(" ", 1)[0] for name in SOCKET_FAMILIES.values())
    protocols = ", ".join(name.split(" ", 1)[0] for name in NETLINK_PROTOCOLS.values())
    return (f"socket families: a sandbox opens only {families} (of netlink {protocols}); "
            "every other (AF_VSOCK, AF_PACKET, AF_ALG, AF_KEY, …) gets EAFNOSUPPORT")


def report(env: Mapping[str, str], policy: Policy | None = None) -> dict[str, Any]:
    """What this machine gives, each found by trying it, the protections therefore in
    force, the stated gaps, the dot files' stand-ins now in place, and with a spec what it opens
    and which of its verbs can run (`check`, `check --json`)."""
    bubblewrap = _bubblewrap(env)
    abi = landlock.abi_version()
    namespaces = bool(bubblewrap.get("user_namespaces"))
    seccomp = _seccomp()
    memfd_noexec = _memfd_noexec()
    in_force = [
        *_sandbox_protections(namespaces, abi, seccomp),
        *_network_protections(namespaces),
        _memory_files_protection(namespaces, seccomp, memfd_noexec),
        *_verb_protections(namespaces),
    ]
    settings = _settings_or_none(env)
    return {
        "ready": (namespaces and abi >= 1 and seccomp["user_notification"]
                  and arch.supported()),
        "kernel": os.uname().release,
        "architecture": {"machine": arch.MACHINE, "filter_built": arch.supported(),
                         "built_for": list(arch.ARCHITECTURES)},
        "bubblewrap": bubblewrap,
        "landlock_abi": abi,
        "seccomp": seccomp,
        "memfd_noexec": memfd_noexec,
        "protections": in_force,
        "gaps": list(STATED_GAPS),
        "placeholders": _standins_in_place(settings),  # the key: user-visible
        "home": _home(env, policy),
        "network": _network(policy),
        "model_verb": _model_verb(settings, policy),
        "secret_verb": _secret_verb(settings, policy),
    }


def _settings_or_none(env: Mapping[str, str]) -> str | None:
    """Link's settings folder, or None where there is none to report on."""
    try:
        return settings_folder(env).root
    except SettingsError:
        return None


def _standins_in_place(settings: str | None) -> list[dict[str, Any]]:
    """The dot files' stand-ins that runs hold now (none listed: an empty list)."""
    try:
        return [{"path": path, "kind": kind, "runs": runs} for path, kind, runs
                in standins.index_entries(settings)] if settings else []
    except OSError:
        return []


def _sandbox_protections(namespaces: bool, abi: int,
                         seccomp: dict[str, Any]) -> list[dict[str, Any]]:
    """What the sandbox itself closes: mounts, Landlock, namespaces, the seccomp filter,
    the programs and the unix sockets."""
    return [
        {"protection": "files: mounts (bubblewrap)", "in_force": namespaces},
        {"protection": "files: Landlock", "in_force": abi >= 1, "abi": abi},
        {"protection": "signals and abstract sockets scoped (Landlock ABI 6)",
         "in_force": abi >= 6},
        {"protection": "no capabilities, own user namespace, even for root",
         "in_force": namespaces},
        {"protection": "own pid, network, ipc and uts namespaces", "in_force": namespaces},
        {"protection": "dot files of written folders read only, missing ones held by "
                       "placeholders (but for write_dot_files)", "in_force": namespaces},
        {"protection": "seccomp filter: kernel modules, kexec, bpf, perf, keyrings, mounts "
                       "and namespaces, ptrace, userfaultfd, io_uring, TIOCSTI … refused with "
                       "an errno; running a file descriptor refused",
         "in_force": namespaces and seccomp["available"]},
        {"protection": _socket_families(), "in_force": namespaces and seccomp["available"]},
        {"protection": "[commands]: only listed programs start (Landlock's execute right); "
                       "a refused one is named by the exec watch",
         "in_force": namespaces and abi >= 1 and seccomp["user_notification"]},
        {"protection": "unix sockets by path: a program connects (or sends with sendto) "
                       "only to one made inside its own sandbox; others get EACCES, named "
                       "on stderr and in the watch's log (Landlock ABI 6 scopes abstract "
                       "ones)",
         "in_force": namespaces and seccomp["user_notification"]},
    ]


def _network_protections(namespaces: bool) -> list[dict[str, Any]]:
    """What the network's one way out closes: the proxy, its DNS, the wire's controls."""
    return [
        {"protection": "network: none at all, or the filtering proxy as the one way out "
                       "(or, where a spec says mode = \"host\", this machine's network as "
                       "it is) "
                       "(hosts by name before any lookup; never this machine, its networks "
                       "or a metadata service; TLS ClientHello checked; strict heads)",
         "in_force": namespaces},
        {"protection": "DNS only with [tcp] endpoints, answered by the proxy: listed names get "
                       "addresses of the sandbox's own, others NXDOMAIN and no query "
                       "outside; .local and one-label SRV/TXT refused; [lan] through the "
                       "proxy, never this machine; [localhost] ports relayed by name, "
                       "never \"*\"", "in_force": namespaces},
        {"protection": "wire controls: calls a minute, the kill switch (lnk-sandbox stop), "
                       "pause on anomaly (paused, resume)", "in_force": namespaces},
    ]


def _memory_files_protection(namespaces: bool, seccomp: dict[str, Any],
                             memfd_noexec: bool) -> dict[str, Any]:
    return {"protection": "memory files made non-executable where [commands] lists programs",
            "in_force": namespaces and memfd_noexec and seccomp["user_notification"],
            **({} if memfd_noexec else {"why": "Linux before 6.3: only running a descriptor "
                                               "(execveat) is refused"})}


def _verb_protections(namespaces: bool) -> list[dict[str, Any]]:
    """What each verb holds back: the keys, the secrets, asking first, the local models,
    the pages, the guests."""
    return [
        {"protection": "the model verb (/_link/model/<provider>), off unless [verbs] model "
                       "names the provider: the key is a secret of Link's settings added at "
                       "the proxy at each call; the sandbox holds a placeholder and no "
                       "provider's key; server-side tools removed by allow-list unless "
                       "[network] server_tools; URL sources and search models refused",
         "in_force": namespaces},
        {"protection": "the secret verb (/_link/secret/<name>), off unless [verbs] secrets "
                       "names the secret: put into the calls its plugin's rule allows (one "
                       "host, path shapes matched without decoding, refused names in any "
                       "case); the sandbox holds a placeholder of the rule's shape",
         "in_force": namespaces},
        {"protection": "tools that run outside ([verbs] tools), reached through the MCP verb "
                       "behind the URL secret: each tools/call asks you first (a dialog, the "
                       "terminal, or lnk-sandbox asks/answer) unless the tool allows it; "
                       "silence is no; a server's hints never skip asking",
         "in_force": namespaces},
        {"protection": "local model runtimes ([localhost] models): inference only, by exact "
                       "method and path, one request a connection; admin, pull and cloud "
                       "models refused; also as $LNK_SANDBOX_URL/local/<port> behind a URL "
                       "secret compared in constant time and never logged",
         "in_force": namespaces},
        {"protection": "opening a page ([verbs] open): $BROWSER and xdg-open inside ask the "
                       "proxy, which asks you every time with the whole URL in plain ASCII "
                       "(host in punycode; only http and https, no userinfo) and opens it "
                       "with your own opener; a login's callback to a loopback port is "
                       "passed in once, a port already taken is refused",
         "in_force": namespaces and _browser_built(),
         **({} if _browser_built() else {"why": "the sandbox's browser is not built: run "
                                                "bin/setup with a C compiler"})},
        {"protection": "guests over SSH (lnk-sandbox guest add): a forced command with "
                       "restrict (no forwarding of any kind), every shell, command, scp and "
                       "sftp in the guest's own sandbox, the kept spec checked again at each "
                       "session (a folder become a link is refused)",
         "in_force": namespaces},
    ]


HOST_NETWORK_OPENS = (
    "NETWORK: this machine's network as it is ([network] mode = \"host\"): every host, "
    "this machine's own ports (loopback included), the local network and a cloud's "
    "metadata service, with no log and no pause; `lnk-sandbox stop` ends the sandbox "
    "(there is no wire to close). Still closed: abstract unix sockets (Landlock ABI 6), "
    "unix sockets made outside, and the socket families above")


def _network(policy: Policy | None) -> dict[str, Any]:
    """What the spec's network mode opens, in words (`check --spec`)."""
    if policy is None:
        return {"spec": None, "mode": None, "opens": None}
    opens = {"host": HOST_NETWORK_OPENS,
             "proxy": f"network: through the filtering proxy, to {len(policy.hosts)} "
                      "listed host(s), every call on the wire's log",
             "none": "network: none (only the verbs the spec names)"}[policy.network]
    return {"spec": policy.spec, "mode": policy.network, "opens": opens}


def _home(env: Mapping[str, str], policy: Policy | None) -> dict[str, Any]:
    """The program's HOME under `policy` (lnk_wrap.home), or how it is chosen."""
    if policy is None:
        return {"spec": None, "home": None,
                "how": "its own: a named wire's folder in Link's settings (kept), the "
                       "[agent]'s folder or [files] home, yours only where the spec writes it, "
                       "else one in the private /tmp that ends with the run"}
    from lnk_wrap.home import describe
    from lnk_wrap.launch import _writable_with

    home, how = describe(policy, env, wire=policy.name, writes=_writable_with(policy, ()))
    return {"spec": policy.spec, "home": home, "how": how}


def _secret_verb(settings: str | None, policy: Policy | None) -> dict[str, Any]:
    """The secrets Link's store keeps with a rule (names only); with a spec, the ones it
    names and which of those cannot be used yet (no secret, or no rule: the run is
    refused until they are set)."""
    from lnk_common.secrets import SecretError, list_secrets, rule_names

    found: dict[str, Any] = {}
    try:
        stored = set(list_secrets(settings)) if settings else set()
        ruled = set(rule_names(settings)) if settings else set()
    except SecretError as error:
        stored, ruled = set(), set()
        found["secrets_error"] = str(error)
    found["with_rule"] = sorted(stored & ruled)
    if policy is not None:
        found["spec"] = policy.spec
        found["on"] = list(policy.secrets)
        found["not_ready"] = [name for name in policy.secrets
                              if name not in stored or name not in ruled]
        found["local_models"] = list(policy.local_models)
    return found


def _show_model_verb(model: dict[str, Any]) -> list[str]:
    missing = [provider for provider in model["providers"] if provider not in model["keys_set"]]
    keys = (f"set for {', '.join(model['keys_set'])}" if model["keys_set"] else "none set")
    keys += f"; not set: {', '.join(missing)}" if missing else ""
    lines = [f"model verb: keys in Link's secrets (names only): {keys}"]
    if "secrets_error" in model:
        lines.append(f"  WARNING: the secrets cannot be listed: {model['secrets_error']}")
    if "on" not in model:
        lines.append("  on where a spec names it ([verbs] model); `check --spec FILE` says "
                     "what that spec turns on")
        return lines
    if not model["on"]:
        lines.append(f"  {model['spec']}: off (no [verbs] model)")
        return lines
    lines.append(f"  {model['spec']}: on for {', '.join(model['on'])}; each key is the secret "
                 "of the provider's name, added at the proxy (the sandbox holds a "
                 "placeholder, and no provider's key)")
    for provider in model["no_key_yet"]:
        lines.append(f"  WARNING: no secret named {provider} yet: its calls are refused "
                     f"until it is set (lnk-sandbox secret set {provider})")
    lines.append("  server-side tools: " + (
        "KEPT ([network] server_tools = true): the provider may search, fetch and run "
        "code on its side" if model["server_tools"] else
        "removed (by allow-list; [network] server_tools = true keeps them)"))
    return lines


def _show_secret_verb(secret: dict[str, Any]) -> list[str]:
    kept = ", ".join(secret["with_rule"]) or "none"
    lines = [f"secret verb: secrets kept with a rule (names only): {kept}"]
    if "secrets_error" in secret:
        lines.append(f"  WARNING: the secrets cannot be listed: {secret['secrets_error']}")
    if "on" not in secret:
        return lines
    if secret["on"]:
        lines.append(f"  {secret['spec']}: on for {', '.join(secret['on'])}")
    for name in secret["not_ready"]:
        lines.append(f"  WARNING: {name} is not in Link's secrets with a rule: the run is "
                     f"refused until it is (lnk-sandbox secret set {name} --rule FILE)")
    if secret["local_models"]:
        lines.append("  local models (inference only): ports "
                     + ", ".join(map(str, secret["local_models"])))
    return lines


def verdict(found: dict[str, Any]) -> str:
    """The one line `check` leads with: ready or not, and the first thing missing (the
    machine's first, then what the spec needs that is not set)."""
    bubblewrap, machine = found["bubblewrap"], found["architecture"]
    if not machine["filter_built"]:
        return (f"NOT ready: no seccomp filter is built for {machine['machine']} (only "
                f"{', '.join(machine['built_for'])})")
    if not bubblewrap["found"]:
        return f"NOT ready: bubblewrap is missing: {bubblewrap['why']}"
    if not bubblewrap["user_namespaces"]:
        return f"NOT ready: user namespaces are refused: {bubblewrap['why']}"
    if not found["landlock_abi"]:
        return "NOT ready: Landlock is absent from this kernel"
    if not found["seccomp"]["user_notification"]:
        return "NOT ready: seccomp user notification is absent from this kernel"
    if not found["ready"]:
        return "NOT ready"
    secret, model = found["secret_verb"], found["model_verb"]
    if secret.get("not_ready"):
        name = secret["not_ready"][0]
        return (f"NOT ready for {secret['spec']}: {name} is not in Link's secrets with a "
                f"rule (lnk-sandbox secret set {name} --rule FILE)")
    if model.get("no_key_yet"):
        provider = model["no_key_yet"][0]
        return (f"ready; but {model['spec']} has no key yet for {provider}: its model calls "
                f"are refused until it is set (lnk-sandbox secret set {provider})")
    return "ready: sandboxes start here" + (
        f" and {secret['spec']} has what it needs" if secret.get("spec") else "")


def show(found: dict[str, Any]) -> str:
    bubblewrap = found["bubblewrap"]
    machine = found["architecture"]
    lines = [verdict(found), ""]
    lines.append(f"kernel {found['kernel']} on {machine['machine']}: seccomp filter "
                 + ("built for it" if machine["filter_built"] else
                    f"NOT built for it (only {', '.join(machine['built_for'])}): no sandbox "
                    "starts"))
    if bubblewrap["found"]:
        lines.append(f"bubblewrap {bubblewrap['version']} at {bubblewrap['path']}; "
                     "user namespaces: "
                     f"{'yes' if bubblewrap['user_namespaces'] else 'REFUSED'}")
        if not bubblewrap["user_namespaces"]:
            lines.append(f"  fix: {bubblewrap['why']}")
    else:
        lines.append(f"bubblewrap: MISSING: {bubblewrap['why']}")
    lines.append(f"Landlock ABI {found['landlock_abi']}"
                 + ("" if found["landlock_abi"] else " (absent: sandboxes refuse to start)"))
    seccomp = found["seccomp"]
    lines.append(f"seccomp: {'yes' if seccomp['available'] else 'no'}; user notification: "
                 f"{'yes' if seccomp['user_notification'] else 'no'}")
    lines.append(f"memory files sealed non-executable (MFD_NOEXEC_SEAL): "
                 f"{'yes' if found['memfd_noexec'] else 'no (Linux before 6.3)'}")
    lines.append("")
    lines.append("protections:")
    for item in found["protections"]:
        mark = "in force" if item["in_force"] else "NOT in force"
        why = f": {item['why']}" if "why" in item else ""
        lines.append(f"  {mark:12} {item['protection']}{why}")
    lines.append("")
    if found["network"]["opens"]:
        lines.append(found["network"]["opens"])
    home = found["home"]
    lines.append(f"HOME: {home['home']}, {home['how']}" if home["home"]
                 else f"HOME: {home['how']}")
    lines.append("")
    lines += _show_model_verb(found["model_verb"])
    lines.append("")
    lines += _show_secret_verb(found["secret_verb"])
    lines.append("")
    lines.append("stated gaps (open by design):")
    for gap in found["gaps"]:
        lines.append(f"  open  {gap['gap']}: {gap['why']}")
    if found["placeholders"]:
        lines.append("")
        lines.append("placeholders now in place (removed when the last run holding them "
                     "ends, or by the next run if that one was killed):")
        for item in found["placeholders"]:
            lines.append(f"  {item['kind']:6} {item['path']} (runs: {len(item['runs'])})")
    lines.append("")
    lines.append("ready: " + ("yes" if found["ready"] else "NO, sandboxes will refuse to start"))
    return "\n".join(lines)
