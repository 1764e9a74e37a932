"""`wrap --platform macos`: the macOS line of a spec, printed on any machine.

Order: the agent's folder made when it is not there yet (as its first start would; the
spec loader then checks it as on Linux) → the spec read into the same Policy as Linux's
(lnk_wrap.spec) → its port (lnk_wrap.seatbelt_ports) → its profile (lnk_wrap.seatbelt) →
the line: `/usr/bin/sandbox-exec -p PROFILE -DNAME=value… -- /usr/bin/env NAME=VALUE…
COMMAND…`. The environment given by `env` is the proxy's address and HOME: nothing
secret (a URL secret or a placeholder is the harness's configuration, `lnk-sandbox url`,
never an argument that `ps` shows).

What runs beside the line on a Mac (built here, run here on loopback, never on a Mac):
the agent's proxy, `lnk-sandbox-proxy … --listen 127.0.0.1:PORT` (`proxy_argv`).
"""

from __future__ import annotations

import os

from lnk_common.chain import helper_argv as helper_start
from lnk_common.policy import Policy, helper_argv, is_name
from lnk_wrap.bwrap import NO_PROXY_LOOPBACK, NODE_PROXY_SWITCH, PROXY_VARIABLES
from lnk_wrap.seatbelt import MacosError, mac_path, profile, sandbox_exec_argv
from lnk_wrap.seatbelt_ports import PortsError, open_folder, port_for

__all__ = ["ENV", "LOOPBACK", "PLATFORMS", "mac_parts", "make_agent_folder",
           "program_environment", "proxy_argv"]

# The platforms `wrap` and `check` take: this machine's own (the default), or macOS.
PLATFORMS = ("linux", "macos")
ENV = "/usr/bin/env"
LOOPBACK = "127.0.0.1"


def program_environment(policy: Policy, port: int | None) -> list[str]:
    """NAME=VALUE words for `env`: the proxy variables at the agent's port (network
    "proxy", or [lan], reached through the proxy), loopback past the proxy, and HOME;
    nothing secret."""
    words: list[str] = []
    if (policy.network == "proxy" or policy.lan) and port is not None:
        address = f"http://{LOOPBACK}:{port}"
        words += [f"{name}={address}" for name in PROXY_VARIABLES]
        words += [f"NO_PROXY={NO_PROXY_LOOPBACK}", f"no_proxy={NO_PROXY_LOOPBACK}",
                  "=".join(NODE_PROXY_SWITCH)]
    if policy.home:
        words.append(f"HOME={mac_path(policy.home)}")
    return words


# What `wrap --platform macos` says on stderr after the line when it needs a proxy. The
# seed keeps lnk-sandbox outside as the parent of sandbox-exec (the proxy, the log
# reader): whatever runs inside Seatbelt is confined with the program, so the line cannot
# start its own proxy. `run --platform macos` is that parent; a kept line needs the
# agent's proxy kept running (Link's service: the port is fixed per agent so that it is
# known before the harness starts). Record 0042, "The parent outside".
PROXY_NOTE = ("this line reaches the network only through the agent's proxy on "
              "127.0.0.1:{port}, which it does not start: run the command with `lnk-sandbox "
              "run --platform macos` (the proxy, the log reader and signals kept outside "
              "it), or keep that proxy running while the line runs; until then every "
              "call is refused")


def mac_parts(policy: Policy, command: list[str]) -> tuple[list[str], int | None]:
    """The macOS line, and the agent's proxy port (None without a wire)."""
    if not command or command[0].startswith("-") or "=" in command[0]:
        raise MacosError("the command's first word may not start with '-' or hold '=': "
                         "/usr/bin/env would read it as its own")
    port: int | None = None
    ports: tuple[int, ...] = ()
    if policy.needs_proxy():
        port, ports = port_for(policy.settings, policy)
    made = profile(policy, proxy_port=port, agent_ports=ports)
    return sandbox_exec_argv(made, [ENV, *program_environment(policy, port), *command]), port


def proxy_argv(policy: Policy, port: int, wire: str) -> list[str]:
    """The agent's proxy on the Mac's loopback: the launcher's proxy options, listening
    at 127.0.0.1:PORT (its URL secret and placeholders in its environment, as on Linux)."""
    start = helper_start("proxy")
    if policy.site_packages:  # h11 and orjson: the proxy runs isolated (-I -S), as on Linux
        start[4:4] = ["--site-packages", policy.site_packages]
    return [*start, "--wire", wire, *helper_argv(policy, "proxy"),
            "--listen", f"{LOOPBACK}:{port}"]


def make_agent_folder(spec_file: str, settings: str) -> None:
    """The agent's own folder (agents/NAME in Link's settings, 0700) made when the spec
    names an [agent] whose folder is not there yet, never through a link; a name that is
    not one, or a folder that cannot be made, is left for the spec loader to say."""
    from lnk_wrap.vendor import tomllib

    try:
        with open(spec_file, "rb") as handle:
            agent = tomllib.loads(handle.read().decode("utf-8")).get("agent")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return
    if not isinstance(agent, dict) or "home" in agent:
        return
    name = agent.get("name")
    if not isinstance(name, str) or not is_name(name):
        return
    try:
        root = open_folder(None, settings)
    except PortsError:
        return
    opened = [root]
    try:
        for folder in ("agents", name):  # never through a link: each opened as it is made
            opened.append(open_folder(opened[-1], folder))
    except PortsError:
        return
    finally:
        for fd in opened:
            os.close(fd)
