"""The parent outside on a Mac (what `run --platform macos` is to call), which stays the
parent.

Order of operations: the line (lnk_wrap.seatbelt_wrap) and its port → the program's
environment and the proxy's (the URL secret, the model verb's and the secrets'
placeholders: in environments, never an argument) → the agent's proxy on its port of the
Mac's loopback, waited on until it takes connections (a port already taken is refused:
another run of the agent holds it) → `sandbox-exec` started as a child → with
`[commands]`, the log reader (lnk_wrap.seatbelt_log) on the child's tree → stop signals
passed on to the child → the child's status (128+N on signal N), the refused programs
named on stderr as advice, the proxy stopped.

Never run on a Mac. Tested here with a fake /usr/bin/sandbox-exec (a script that
drops the profile and runs the command: no Seatbelt exists here), the real proxy on
loopback, and a fake `log`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from lnk_common.policy import Policy
from lnk_wrap.seatbelt import SANDBOX_EXEC, MacosError
from lnk_wrap.seatbelt_log import LogReader
from lnk_wrap.seatbelt_wrap import LOOPBACK, mac_parts, proxy_argv

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["PROXY_START_SECONDS", "environments", "run_macos", "run_reported"]

# How long the proxy has to take connections: it imports nothing heavy before its first.
PROXY_START_SECONDS = 20.0
# The signals a person or a harness stops a run with, passed on to the program.
_PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def environments(policy: Policy, env: Mapping[str, str], port: int | None
                 ) -> tuple[dict[str, str], dict[str, str]]:
    """(the program's environment, what the proxy is given beside the caller's): the
    model verb's placeholder and base URLs, the secrets' placeholders, the URL secret,
    each at the agent's port; MacosError when one cannot be had."""
    from lnk_wrap import model_env, verb_env

    try:
        # As on Linux: no variable a tool's definition names, nor the proxy's placeholder
        # variable, whatever the caller's environment held.
        program, notes = verb_env.without_tool_variables(env, policy.settings)
    except verb_env.VerbEnvError as error:
        raise MacosError(str(error)) from None
    for note in notes:
        print(f"lnk-sandbox: {note}", file=sys.stderr)
    program.pop("LNK_PLACEHOLDER", None)
    given: dict[str, str] = {}
    if port is None:
        return program, given
    try:
        if policy.models:
            placeholder = model_env.placeholder_for(policy)
            program, _ = model_env.sandbox_environment(
                program, policy.models, placeholder, proxy_address=LOOPBACK, proxy_port=port)
            given["LNK_PLACEHOLDER"] = placeholder
        placeholders = verb_env.secret_placeholders(policy)
        url_secret = verb_env.url_secret_for(policy) if policy.has_url_secret() else ""
        program = verb_env.sandbox_environment(program, placeholders=placeholders,
                                               url_secret=url_secret, proxy_address=LOOPBACK,
                                               proxy_port=port)
    except (model_env.ModelEnvError, verb_env.VerbEnvError) as error:
        raise MacosError(str(error)) from None
    given.update(verb_env.proxy_environment(placeholders, url_secret))
    return program, given


def _taken(port: int) -> bool:
    try:
        socket.create_connection((LOOPBACK, port), timeout=1).close()
    except OSError:
        return False
    return True


def _start_proxy(policy: Policy, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The agent's proxy on its port, once it takes connections; refused when the port is
    taken already (never shared: another run of the agent, or anything else, holds it)."""
    if _taken(port):
        raise MacosError(f"127.0.0.1:{port}, the proxy's port of this agent, is taken: "
                         "another run of the agent, or another program, holds it")
    proxy = subprocess.Popen(proxy_argv(policy, port, policy.name or policy.agent), env=env,
                             stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + PROXY_START_SECONDS
    while not _taken(port):
        if proxy.poll() is not None or time.monotonic() > deadline:
            proxy.kill()
            proxy.wait()
            raise MacosError(f"the proxy did not start on 127.0.0.1:{port}")
        time.sleep(0.02)
    return proxy


def run_macos(policy: Policy, command: list[str], env: Mapping[str, str], *,
              sandbox_exec: str = SANDBOX_EXEC) -> int:
    """Run `command` under `policy`'s profile (the module's order); its status."""
    status, named = run_reported(policy, command, env, sandbox_exec=sandbox_exec)
    for path in named:
        print(f"lnk-sandbox: [commands] refused {path} (Seatbelt's report)", file=sys.stderr)
    return status


def run_reported(policy: Policy, command: list[str], env: Mapping[str, str], *,
                 sandbox_exec: str = SANDBOX_EXEC) -> tuple[int, list[str]]:
    """Run `command` under `policy`'s profile: its status, and the programs Seatbelt
    reported (refused ones; for a learning policy, the ones it ran)."""
    argv, port = mac_parts(policy, command)
    if not os.access(sandbox_exec, os.X_OK):
        raise MacosError(f"no {sandbox_exec}: this is not a Mac")
    argv[0] = sandbox_exec
    program_env, given = environments(policy, env, port)
    proxy = _start_proxy(policy, port, {**env, **given}) if port is not None else None
    try:
        return _run_child(policy, argv, program_env, env)
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait()


def _run_child(policy: Policy, argv: list[str], program_env: dict[str, str],
               env: Mapping[str, str]) -> tuple[int, list[str]]:
    child = subprocess.Popen(argv, env=program_env)
    reader = None
    if policy.commands or policy.learn:
        try:
            reader = LogReader(child.pid, env, learning=bool(policy.learn))
        except OSError as error:
            print(f"lnk-sandbox: {error}", file=sys.stderr)
    previous = {number: signal.signal(number, lambda got, _: child.send_signal(got))
                for number in _PASSED_ON}
    try:
        status = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    named = reader.stop() if reader is not None else []
    return (128 - status if status < 0 else status), named
