"""`lnk-sandbox check --platform macos`: what the Seatbelt profile puts in force on a Mac,
and which gaps stay open there.

sans IO but for two looks (`report`): whether this machine is a Mac with
/usr/bin/sandbox-exec, and there, whether it takes the profile (`compiled`). The macOS
backend has never run on a Mac: every protection listed as in force is what the profile
generated here says (golden- and property-tested, and evaluated by the tests' evaluator
of the profile language), not what a Mac was seen to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from lnk_common.policy import Policy
from lnk_wrap.seatbelt import SANDBOX_EXEC, MacosError, profile, sandbox_exec_argv
from lnk_wrap.seatbelt_ports import PortsError, block_port, key_of

__all__ = ["COMPILE_SECONDS", "MACOS_GAPS", "MACOS_IN_FORCE", "compiled", "print_report",
           "report", "show"]

# (protection, how the profile holds it), each from the seed's macOS lines.
MACOS_IN_FORCE = (
    ("files", "Seatbelt (sandbox-exec): deny default; read, write, hide, reopen as on Linux, "
              "the deepest rule deciding; Link's settings and every agent's folder hidden, "
              "the agent's own reopened; every path a parameter, never pasted"),
    ("dot files", "the dot files at the top of written folders read only, a missing one "
                  "refused by Seatbelt itself (.envrc too); write_dot_files opens them"),
    ("Keychain", "securityd, its XPC names, the keychain daemons and the security agent "
                 "denied last: a stored password is read as nothing"),
    ("network", "only the proxy's port on the Mac's loopback (fixed per agent: main's is "
                "40781) and [localhost] ports; [localhost] models only through the proxy's "
                "inference filter; [tcp] endpoints refused at wrap"),
    ("verbs on the Mac's loopback", "every verb without a key takes the URL secret "
                                    "(/_link/s/<secret>/…); the key and bot verbs only the "
                                    "placeholder"),
    ("[commands]", "process-exec* allowed by file; a refused program named from Seatbelt's "
                   "own reports (log stream), as advice"),
)
# What stays open on a Mac, with the reason (the seed's, and what is not built).
MACOS_GAPS = (
    ("never run on a Mac", "the profile is generated and tested here, on Linux; no Mac has "
                           "compiled it or run a program under it"),
    ("the parent outside", "the Mac's parent (the agent's proxy on its port, the log "
                           "reader, signals) is tested here with a fake sandbox-exec, "
                           "not run on a Mac; a kept wrap line needs the agent's proxy "
                           "running on its port"),
    ("no private /tmp", "a Mac has no mount namespace: the sandbox has no temporary folder "
                        "of its own unless the spec writes one"),
    ("stat above the grants", "the folders above a granted path can be looked at (not "
                              "listed), as the mounts show them on Linux"),
    ("dot files of hooks", "git's hooks folders and a hook manager's settings named inside "
                           "a repository are held on Linux at each start; the Mac's line is "
                           "fixed when wrapped and holds the top-level names only"),
    ("unix sockets", "Seatbelt cannot tell who made a socket, so no unix socket is reached "
                     "by path (Linux reaches one made inside the same sandbox)"),
    ("interpreters", "[commands] limits which files start, not what an interpreter is told "
                     "to do, on the Mac as on Linux"),
    ("naming refused programs", "a report names a process, not a sandbox: another sandbox's "
                                "refusal at the same moment may be named too"),
)


def _spec(policy: Policy) -> dict[str, Any]:
    """Whether the spec has a macOS profile (main's port stands for the agent's: no
    block is given by a check), or why not."""
    try:
        if policy.needs_proxy():
            key_of(policy)  # a port needs an agent or a wire to be fixed for
        made = profile(policy, proxy_port=block_port(0) if policy.needs_proxy() else None)
    except (MacosError, PortsError) as error:
        return {"file": policy.spec, "macos": False, "why": str(error)}
    return {"file": policy.spec, "macos": True, "rules": made.text.count("\n"),
            "parameters": len(made.parameters)}


# A compile of the profile on a Mac: sandbox-exec reads it and runs /usr/bin/true.
COMPILE_SECONDS = 20
# Where the compile's profile puts Link's settings when no spec gives them: a folder that
# is on every Mac and holds nothing (it is hidden, as the settings are).
_NO_SETTINGS = "/private/var/empty"


def compiled(policy: Policy, sandbox_exec: str = SANDBOX_EXEC) -> tuple[bool, str]:
    """Whether this Mac's sandbox-exec takes the profile of `policy` and runs
    /usr/bin/true under it; else its last line of complaint. The first thing a Mac
    confirms (record 0042): nothing else here has met a real profile compiler."""
    try:
        made = profile(policy, proxy_port=block_port(0) if policy.needs_proxy() else None)
        argv = sandbox_exec_argv(made, ["/usr/bin/true"])
    except MacosError as error:
        return False, str(error)
    argv[0] = sandbox_exec
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_SECONDS,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"{sandbox_exec}: {error}"
    said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return done.returncode == 0, "" if done.returncode == 0 else said


def report(policy: Policy | None = None, *, on_a_mac: bool = sys.platform == "darwin",
           sandbox_exec: str = SANDBOX_EXEC) -> dict[str, Any]:
    """The macOS report; `ready` only on a Mac whose sandbox-exec takes the profile (the
    spec's, or one of no grant); with a spec's policy, whether it has a macOS profile."""
    found = on_a_mac and os.access(sandbox_exec, os.X_OK)
    spec = {} if policy is None else {"spec": _spec(policy)}
    compile_found: dict[str, Any] = {}
    if found:
        taken, why = compiled(policy or Policy(settings=_NO_SETTINGS), sandbox_exec)
        compile_found = {"profile_compiles": taken, **({"why": why} if why else {})}
    return {**spec, **compile_found,
        "platform": "macos",
        "backend": "Seatbelt (sandbox-exec)",
        "this_machine": ("a Mac, with sandbox-exec" if found else "a Mac without sandbox-exec"
                         if on_a_mac else "not a Mac: the profile is generated here only"),
        "ready": bool(found and compile_found.get("profile_compiles")),
        "tested_on_a_mac": False,
        "in_force": [{"protection": name, "how": how} for name, how in MACOS_IN_FORCE],
        "open": [{"gap": name, "why": why} for name, why in MACOS_GAPS],
    }


def show(found: dict[str, Any]) -> str:
    lines = [f"macOS: {found['backend']}; never run on a Mac ({found['this_machine']})",
             "in force on a Mac, by the profile generated here:"]
    lines += [f"  {item['protection']}: {item['how']}" for item in found["in_force"]]
    lines.append("open on a Mac:")
    lines += [f"  {item['gap']}: {item['why']}" for item in found["open"]]
    if "profile_compiles" in found:
        lines.append("this Mac's sandbox-exec " + (
            "takes the profile" if found["profile_compiles"]
            else f"refuses the profile: {found['why']}"))
    spec = found.get("spec")
    if spec is not None:
        lines.append(f"{spec['file']}: " + (
            f"a macOS profile of {spec['rules']} rules and {spec['parameters']} parameters"
            if spec["macos"] else f"no macOS profile: {spec['why']}"))
    return "\n".join(lines)


def print_report(policy: Policy | None, *, as_json: bool) -> int:
    """The report on stdout (JSON, or lines); exit 0 on a Mac ready for it, else 1."""
    found = report(policy)
    if as_json:
        import orjson

        sys.stdout.buffer.write(orjson.dumps(found, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(show(found))
    return 0 if found["ready"] else 1
