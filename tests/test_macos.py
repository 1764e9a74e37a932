"""The macOS Seatbelt backend, proven as far as a Linux machine can (lnk_wrap.seatbelt).

No Mac runs here. The profile is golden-tested over a matrix of policies (the example
specs, the harness recipes, and policies made for the features they lack), property-
tested (no path, host or name of the policy in the text; every parameter named is given
and every one given is named; the text is the language's s-expressions; no literal over
the compiler's limit), and evaluated by tests/seatbelt_eval.py, whose answers are
compared with the Linux backend's (lnk_wrap.bwrap.access_at and the dot files
lnk_wrap.dotfiles holds) for the same policy and paths. BY_DESIGN lists where the two
differ, and why. Regenerate the golden files with LNK_WRITE_GOLDEN=1 (and read the diff).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lnk_common.policy import Policy
from lnk_wrap import check_macos, seatbelt_ports
from lnk_wrap.bwrap import Access, HostFacts, access_at, plan
from lnk_wrap.dotfiles import TOP_NAMES, find
from lnk_wrap.seatbelt import (
    KEYCHAIN_SERVICES,
    MAX_LITERAL_BYTES,
    MAX_MAC_PATH_BYTES,
    Command,
    MacosError,
    Parameter,
    Profile,
    ProfileText,
    mac_path,
    profile,
    sandbox_exec_argv,
)
from lnk_wrap.seatbelt_wrap import ENV, mac_parts, program_environment, proxy_argv
from lnk_wrap.spec import SpecError, load_spec

from .conftest import LNK_SANDBOX, ROOT, VENV_PYTHON, fuzz
from .seatbelt_eval import Evaluated, Regex, SbplError, Symbol, evaluate, parse

GOLDEN = Path(__file__).parent / "golden" / "macos"
EXAMPLES = ROOT / "examples"
MATRIX_SPECS = sorted([*EXAMPLES.glob("*.toml"), *EXAMPLES.glob("harnesses/*/spec.toml"),
                       *EXAMPLES.glob("harnesses/*/proxy.toml")])

# Where the same spec means something else on macOS than on Linux, by design (the record
# 0042 says each at length). The comparison below checks every other path.
BY_DESIGN = {
    "a missing .envrc": "Linux leaves it to be made (direnv runs none until allowed); "
                        "Seatbelt refuses making it",
    "dot files a repository names": "Linux holds the hooks folders and a hook manager's "
                                    "settings git would run at each start; the Mac's line is "
                                    "fixed when wrapped: the top-level names only",
    "temporary folders": "Linux gives a private /tmp and /var/tmp; a Mac has no mount "
                         "namespace, so there is none",
    "system folders": "each platform's own (lnk_wrap.system, seatbelt.MAC_SYSTEM_FOLDERS)",
    "the folders above a grant": "stat allowed on a Mac; on Linux the mounts make them",
    "[tcp] endpoints": "refused on macOS: a plain TCP client does not use the proxy",
    "[localhost] ports": "relayed in and logged on Linux; on a Mac the port is allowed whole",
    "unix sockets by path": "Linux reaches one made inside the same sandbox; Seatbelt cannot "
                            "tell who made a socket, so a Mac reaches none",
}


def _settings_env(tmp_path: Path) -> dict[str, str]:
    settings = tmp_path / "lnk"
    settings.mkdir(exist_ok=True)
    return {"HOME": str(tmp_path), "LNK_HOME": str(settings), "PATH": os.environ["PATH"]}


def _made(policy: Policy, tmp_settings: str | None = None) -> tuple[Profile, list[str]]:
    """The profile and the whole line, as `wrap --platform macos` makes them (its ports'
    table in the policy's settings, or in `tmp_settings` for a settings folder that is
    only a name)."""
    if tmp_settings is None:
        argv = mac_line(policy, ["/bin/echo", "hi"])
        parameters = tuple(tuple(word[2:].split("=", 1)) for word in argv[3:argv.index("--")])
        return Profile(argv[2], parameters), argv  # type: ignore[arg-type]
    port = None
    ports: tuple[int, ...] = ()
    if policy.needs_proxy():
        port, ports = seatbelt_ports.port_for(tmp_settings, policy)
    made = profile(policy, proxy_port=port, agent_ports=ports)
    return made, sandbox_exec_argv(made, [ENV, *program_environment(policy, port),
                                          "/bin/echo", "hi"])


def _golden(name: str, found: dict[str, object]) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("LNK_WRITE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(found, indent=1) + "\n")
    assert path.exists(), f"no golden file {path}: LNK_WRITE_GOLDEN=1 writes it"
    assert found == json.loads(path.read_text())


# Where the golden files put the checkout and Link's settings: fixed names, so that the
# files hold the same wherever the checkout and the test's folder are.
GOLDEN_ROOT = "/Users/u/lnk-sandbox"
GOLDEN_SETTINGS = "/Users/u/.config/lnk"


def _rebased(policy: Policy, tmp_path: Path) -> Policy:
    """`policy` with the checkout at GOLDEN_ROOT and the settings at GOLDEN_SETTINGS."""
    def moved(path: str) -> str:
        for real, fixed in ((str(tmp_path / "lnk"), GOLDEN_SETTINGS), (str(ROOT), GOLDEN_ROOT)):
            if path == real or path.startswith(real + "/"):
                return fixed + path[len(real):]
        return path
    changes: dict[str, object] = {
        name: tuple(moved(path) for path in getattr(policy, name))
        for name in ("read", "write", "hide", "reopen", "write_dot_files", "commands")}
    return policy.replace(settings=moved(policy.settings), home=moved(policy.home),
                          spec=moved(policy.spec), **changes)


def _as_golden(made: Profile, argv: list[str]) -> dict[str, object]:
    return {"profile": made.text.splitlines(), "parameters": [list(item) for item in
                                                              made.parameters],
            "tail": argv[argv.index("--"):]}


# -- the golden matrix -------------------------------------------------------------------


@pytest.mark.parametrize("spec", MATRIX_SPECS, ids=lambda spec: str(spec.relative_to(EXAMPLES)))
def test_profile_golden_for_every_example_spec(spec: Path, tmp_path: Path) -> None:
    policy = _rebased(load_spec(spec, _settings_env(tmp_path)), tmp_path)
    name = str(spec.relative_to(EXAMPLES)).replace("/", "_").removesuffix(".toml")
    try:
        made, argv = _made(policy, str(tmp_path))
    except MacosError as error:
        _golden(name, {"refused": str(error)})
        return
    _golden(name, _as_golden(made, argv))


def _agent_policy(root: str, settings: str, **more: object) -> Policy:
    fields: dict[str, object] = {
        "settings": settings, "agent": "main", "name": "main", "network": "proxy",
        "hosts": ("api.github.com",), "home": f"{settings}/agents/main",
        "read": (f"{root}/src",),
        "write": (f"{root}/src/app", f"{root}/files", f"{settings}/agents/main"),
        "hide": (f"{root}/src/app/secrets", f"{settings}/agents"),
        "reopen": (f"{root}/src/app/secrets/public.pem",),
        "write_dot_files": (f"{settings}/agents/main",),
    }
    fields.update(more)
    return Policy(**fields)


MADE: dict[str, dict[str, object]] = {
    "agent_main": {},
    "agent_commands": {"commands": ("/usr/bin/git", "/bin/sh")},
    "agent_learn": {"commands": ("/bin/sh",), "learn": "/L/learn"},
    "agent_verbs": {"network": "none", "hosts": (), "tools": ("github",), "open_pages": True,
                    "local_models": (11434,), "localhost_ports": (5432,),
                    "models": ("anthropic",)},
    "agent_network_host": {"network": "host", "hosts": ()},
    "no_network": {"agent": "", "name": "quiet", "network": "none", "hosts": ()},
}


@pytest.mark.parametrize("name", sorted(MADE))
def test_profile_golden_for_made_policies(name: str, tmp_path: Path) -> None:
    policy = _agent_policy("/Users/u", GOLDEN_SETTINGS, **MADE[name])
    made, argv = _made(policy, str(tmp_path))
    _golden(name, _as_golden(made, argv))


# -- what the profile holds, by the evaluator ---------------------------------------------


def _evaluated(policy: Policy, tmp_path: Path) -> Evaluated:
    made, _ = _made(policy, str(tmp_path))
    return evaluate(made.text, dict(made.parameters))


def test_N1_agent_main_gets_port_40781_and_nothing_else_of_the_network(tmp_path: Path) -> None:
    (tmp_path / "lnk").mkdir()
    policy = _agent_policy("/Users/u", str(tmp_path / "lnk"))
    made, argv = _made(policy)
    rules = evaluate(made.text, dict(made.parameters))
    assert rules.may_connect(40781)
    for port in (40780, 40782, 443, 80, 53, 3128, 11434):
        assert not rules.may_connect(port), port
    assert not rules.may_listen(40781)
    assert "HTTPS_PROXY=http://127.0.0.1:40781" in argv


def test_the_keychain_services_are_denied_in_every_profile(tmp_path: Path) -> None:
    for name, more in MADE.items():
        policy = _agent_policy("/Users/u", GOLDEN_SETTINGS, **more)
        made, _ = _made(policy, str(tmp_path))
        rules = evaluate(made.text, dict(made.parameters))
        for service in KEYCHAIN_SERVICES:
            assert not rules.may_look_up(service), (name, service)
        assert rules.may_look_up("com.apple.system.opendirectoryd.libinfo")
        assert not rules.may_look_up("com.apple.dnssd.service") or more.get("network") == "host"
        # Denied last: no rule after it can open the Keychain again.
        assert made.text.rstrip().splitlines()[-1].startswith("(deny mach-lookup")


def test_N1_V5_local_models_closed_localhost_ports_open_and_a_login_may_listen(
        tmp_path: Path) -> None:
    policy = _agent_policy("/Users/u", str(tmp_path / "lnk"), **MADE["agent_verbs"])
    rules = _evaluated(policy, tmp_path)
    assert rules.may_connect(40781)  # the verbs: the URL secret's, the model's
    assert rules.may_connect(5432)  # [localhost] ports: the port whole
    assert not rules.may_connect(11434)  # [localhost] models: only through the filter
    assert rules.may_listen(8976)  # a login's callback arrives as it is
    assert not rules.may_listen(40781)  # never an agent's proxy port


def test_F1_F2_F6_files_hide_reopen_settings_and_agents(tmp_path: Path) -> None:
    settings = "/Users/u/.config/lnk"
    policy = _agent_policy("/Users/u", settings)
    rules = _evaluated(policy, tmp_path)
    assert rules.may_read("/Users/u/src/README") and not rules.may_write("/Users/u/src/README")
    assert rules.may_write("/Users/u/src/app/main.py")
    assert not rules.may_read("/Users/u/src/app/secrets/key")
    assert not rules.may_write("/Users/u/src/app/secrets/new")
    assert rules.may_read("/Users/u/src/app/secrets/public.pem")
    assert rules.may_write("/Users/u/src/app/secrets/public.pem")  # what its grant gives
    assert not rules.may_read(f"{settings}/secrets/anthropic")
    assert not rules.may_read(f"{settings}/agents/other/url-secret")  # every agent hidden
    assert rules.may_write(f"{settings}/agents/main/.codex/config.toml")  # its own reopened
    assert not rules.may_read("/Users/u/Documents/x") and not rules.may_stat("/Users/u/Documents")
    assert rules.may_stat("/Users/u") and not rules.may_read("/Users/u")
    # The folders between a written folder and what is narrowed in it cannot be renamed.
    assert rules.may_rename("/Users/u/src/app/other")


def test_F4_dot_files_at_the_top_read_only_there_or_missing(tmp_path: Path) -> None:
    policy = _agent_policy("/Users/u", "/Users/u/.config/lnk")
    rules = _evaluated(policy, tmp_path)
    for name, _, _, _ in TOP_NAMES:
        for top in ("/Users/u/src/app", "/Users/u/files"):
            assert rules.may_read(f"{top}/{name}")
            assert not rules.may_write(f"{top}/{name}"), (top, name)
            assert not rules.may_create(f"{top}/{name}/x"), (top, name)
    assert rules.may_write("/Users/u/src/app/sub/.git/config")  # below the top: its work
    assert rules.may_write("/Users/u/src/app/.gitignore")  # not a name that runs
    assert rules.may_write("/Users/u/.config/lnk/agents/main/.git/config")  # write_dot_files


def test_P1_commands_run_by_file_and_learn_runs_everything_reported(tmp_path: Path) -> None:
    policy = _agent_policy("/Users/u", "/Users/u/.config/lnk", **MADE["agent_commands"])
    rules = _evaluated(policy, tmp_path)
    assert rules.may_run("/usr/bin/git") and rules.may_run("/bin/sh")
    assert not rules.may_run("/usr/bin/curl") and not rules.may_run("/Users/u/src/app/x")
    assert rules.may_read("/usr/bin/curl")  # read, not run
    learning = _evaluated(policy.replace(learn="/L/learn"), tmp_path)
    assert learning.may_run("/usr/bin/curl")
    assert "(allow process-exec* (with report))" in _made(
        policy.replace(learn="/L/learn"), str(tmp_path))[0].text
    anything = _evaluated(policy.replace(commands=()), tmp_path)
    assert anything.may_run("/usr/bin/curl") and anything.may_run("/Users/u/src/app/x")
    assert not anything.may_run("/Users/u/src/app/secrets/tool")


def test_endpoints_are_refused_with_the_reason(tmp_path: Path) -> None:
    policy = _agent_policy("/Users/u", str(tmp_path), endpoints=("db.example.com:5432",))
    with pytest.raises(MacosError, match=r"\[tcp\] endpoints have no macOS equivalent"):
        _made(policy)


def test_paths_as_the_mac_resolves_them() -> None:
    assert mac_path("/tmp/x") == "/private/tmp/x" and mac_path("/tmp") == "/private/tmp"
    assert mac_path("/var/folders/a") == "/private/var/folders/a"
    assert mac_path("/etc/hosts") == "/private/etc/hosts"
    assert mac_path("/tmpx/a") == "/tmpx/a" and mac_path("/Users/u") == "/Users/u"


def test_a_path_past_the_macs_path_max_is_refused() -> None:
    long = "/Users/" + "a" * MAX_MAC_PATH_BYTES
    with pytest.raises(MacosError, match="PATH_MAX"):
        profile(Policy(settings="/s", read=(long,)), proxy_port=None)
    profile(Policy(settings="/s", read=("/" + "a" * (MAX_MAC_PATH_BYTES - 1),)), proxy_port=None)


# -- the evaluator against the Linux backend ----------------------------------------------


def _tree(tmp_path: Path, **more: object) -> tuple[Policy, list[str]]:
    """A real folder tree under /tmp (so /private/tmp on a Mac) with dot files, and a
    policy over it: read, write, hide, reopen, an agent's folders (and `more`)."""
    root = tmp_path / "work"
    for folder in ("src/app/secrets", "src/app/.git", "src/app/.vscode", "files",
                   "lnk/agents/main/.git", "lnk/agents/other", "lnk/secrets", "outside"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for file in ("src/app/.envrc", "src/app/secrets/public.pem", "src/app/secrets/key",
                 "src/README", "outside/x", "lnk/secrets/anthropic"):
        (root / file).write_text("x")
    real = os.path.realpath(root)
    policy = _agent_policy(real, f"{real}/lnk", **{
        "home": "", "write_dot_files": (f"{real}/lnk/agents/main",), **more})
    probes = [f"{real}/{rest}" for rest in (
        "src", "src/README", "src/new", "src/app", "src/app/main.py", "src/app/.git",
        "src/app/.git/config", "src/app/.vscode/tasks.json", "src/app/.envrc",
        "src/app/.husky/pre-commit", "src/app/.idea/x", "src/app/.gitignore",
        "src/app/secrets", "src/app/secrets/key", "src/app/secrets/public.pem",
        "files", "files/.git/HEAD", "files/a", "lnk", "lnk/secrets/anthropic", "lnk/agents",
        "lnk/agents/other/x", "lnk/agents/main", "lnk/agents/main/.git/config", "outside/x",
        "srcx/y")]
    return policy, probes


def _linux(policy: Policy, path: str, held: set[str]) -> tuple[bool, bool]:
    """The Linux backend's answer at `path`: (may read, may write)."""
    access = access_at(policy, HostFacts(system_dirs=(), system_links=(), system_hidden=()),
                       path)
    readable = access in (Access.READ, Access.WRITE)
    writable = access == Access.WRITE and not any(
        path == one or path.startswith(one + "/") for one in held)
    return readable, writable


@pytest.mark.parametrize("name", sorted(MADE))
def test_the_evaluator_agrees_with_the_linux_backend(name: str, tmp_path: Path) -> None:
    policy, probes = _tree(tmp_path, **MADE[name])
    found = find(policy, {"HOME": str(tmp_path)})
    held = {*found.held, *found.standins}
    made = profile(policy, proxy_port=40781, system=())
    rules = evaluate(made.text, dict(made.parameters))
    differ = []
    for path in probes:
        linux = _linux(policy, path, held)
        mac = (rules.may_read(mac_path(path)), rules.may_write(mac_path(path)))
        if linux != mac:
            differ.append((path, linux, mac))
    assert differ == []


def test_the_example_specs_mean_the_same_on_both(tmp_path: Path) -> None:
    for spec in MATRIX_SPECS:
        policy = load_spec(spec, _settings_env(tmp_path))
        if policy.endpoints:
            continue  # refused on macOS (BY_DESIGN)
        found = find(policy, {"HOME": str(tmp_path)})
        held = {*found.held, *found.standins}
        made = profile(policy, proxy_port=40781, system=())
        rules = evaluate(made.text, dict(made.parameters))
        folder = os.path.dirname(policy.spec)
        probes = [os.path.join(folder, rest) for rest in (
            "spec.toml", "README.md", "workspace/x", "work/x", "home/.config/x", "secret/token",
            "work/.git/config", "workspace/.envrc", "home/.git/config")]
        for path in probes:
            linux = _linux(policy, path, held)
            mac = (rules.may_read(mac_path(path)), rules.may_write(mac_path(path)))
            if path.endswith("/.envrc") and not os.path.exists(path) and linux[1]:
                assert mac == (linux[0], False), (spec, path)  # BY_DESIGN: a missing .envrc
                continue
            assert linux == mac, (spec, path)


def test_the_by_design_differences_are_as_listed(tmp_path: Path) -> None:
    policy, _ = _tree(tmp_path)
    real = policy.settings.removesuffix("/lnk")
    os.remove(f"{real}/src/app/.envrc")
    found = find(policy, {"HOME": str(tmp_path)})
    held = {*found.held, *found.standins}
    made = profile(policy, proxy_port=40781, system=())
    rules = evaluate(made.text, dict(made.parameters))
    path = f"{real}/src/app/.envrc"
    assert _linux(policy, path, held) == (True, True)  # "a missing .envrc"
    assert (rules.may_read(mac_path(path)), rules.may_write(mac_path(path))) == (True, False)
    assert "a missing .envrc" in BY_DESIGN


# -- properties ----------------------------------------------------------------------------

_SEGMENT = st.text(alphabet=st.sampled_from("abcxyz019 ._-\"()\\;#|'"), min_size=1,
                   max_size=8).filter(lambda text: text not in (".", ".."))
_PATHS = st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda parts: "/hyp-" + "/".join(parts))


@st.composite
def _policies(draw: st.DrawFn) -> Policy:
    write = draw(st.lists(_PATHS, max_size=3, unique=True))
    read = [path for path in draw(st.lists(_PATHS, max_size=3, unique=True))
            if path not in write]
    hide = draw(st.lists(_PATHS, max_size=2, unique=True))
    reopen = [path for path in draw(st.lists(_PATHS, max_size=2, unique=True))
              if any(path.startswith(hidden + "/") for hidden in hide)]
    dots = [path for path in write if draw(st.booleans())]
    network = draw(st.sampled_from(("none", "proxy", "host")))
    return Policy(settings="/hyp-settings/lnk", name="wire", read=tuple(read),
                  write=tuple(write), hide=tuple(hide), reopen=tuple(reopen),
                  write_dot_files=tuple(dots), network=network,
                  hosts=("hyp-host.example",) if network == "proxy" else (),
                  commands=tuple(draw(st.lists(_PATHS, max_size=2, unique=True))),
                  localhost_ports=tuple(draw(st.lists(st.integers(1, 9), max_size=2,
                                                      unique=True)))
                  if network != "host" else ())


def _literals(forms: list[object]) -> list[str]:
    found: list[str] = []
    for form in forms:
        if isinstance(form, list):
            found += _literals(form)
        elif isinstance(form, str) and not isinstance(form, Symbol):
            found.append(form)
    return found


@fuzz(2)
@given(_policies())
def test_no_policy_value_in_the_text_and_every_parameter_given(policy: Policy) -> None:
    made = profile(policy, proxy_port=40781 if policy.needs_proxy() else None)
    values = [*policy.read, *policy.write, *policy.hide, *policy.reopen, *policy.commands,
              policy.settings, *policy.hosts, policy.name]
    for value in values:
        assert value not in made.text, value
    assert "/hyp-" not in made.text and "hyp-" not in made.text
    forms = parse(made.text)  # the language's s-expressions, whole
    rules = evaluate(made.text, dict(made.parameters))  # every name given …
    assert rules.named == {name for name, _ in made.parameters}  # … and every given named
    for literal in _literals(forms):
        assert len(literal.encode()) <= MAX_LITERAL_BYTES
    argv = sandbox_exec_argv(made, ["/bin/true"])
    assert argv[argv.index("--") + 1:] == ["/bin/true"]
    assert all(word.startswith("-D") for word in argv[3:argv.index("--")])


@fuzz()
@given(_policies(), _PATHS)
def test_every_question_is_answered_and_hidden_stays_hidden(policy: Policy, path: str) -> None:
    made = profile(policy, proxy_port=40781 if policy.needs_proxy() else None)
    rules = evaluate(made.text, dict(made.parameters))
    hidden = [*policy.hide, policy.settings]
    inside_hidden = any(path == one or path.startswith(one + "/") for one in hidden)
    given_back = any(path == one or path.startswith(one + "/")
                     for one in (*policy.reopen, *policy.read, *policy.write)
                     if any(one.startswith(hide + "/") for hide in hidden))
    if inside_hidden and not given_back:
        assert not rules.may_read(path) and not rules.may_write(path)
        assert not rules.may_run(path)
    for service in KEYCHAIN_SERVICES:
        assert not rules.may_look_up(service)


def test_the_evaluator_refuses_what_it_does_not_know() -> None:
    with pytest.raises(SbplError, match="never closed"):
        parse("(allow file-read*")
    with pytest.raises(SbplError, match="not given"):
        evaluate('(deny default)(allow file-read* (subpath (param "X")))', {})
    with pytest.raises(SbplError, match="does not know"):
        evaluate('(deny default)(allow file-read* (vnode-type REGULAR-FILE))', {}).may_read("/a")
    with pytest.raises(SbplError, match="localhost or"):
        evaluate('(deny default)(allow network-outbound (remote ip "10.0.0.1:1"))',
                 {}).may_connect(1)
    assert parse('(regex #"^/a\\.b$")') == [[Symbol("regex"), Regex("^/a\\.b$")]]
    # The later rule wins; a quote in a parameter is a value, never the profile.
    rules = evaluate('(deny default)(allow file-read* (subpath (param "P")))'
                     '(deny file-read* (literal (param "P")))', {"P": '/a"b)'})
    assert rules.may_read('/a"b)/c') and not rules.may_read('/a"b)')


# -- the line and the command line -------------------------------------------------------


def _spec(tmp_path: Path) -> Path:
    root = tmp_path / "a-distinctive-folder"
    for folder in ("src", "out", "files"):
        (root / folder).mkdir(parents=True)
    spec = tmp_path / "mac.toml"
    spec.write_text(f'[files]\nread = ["{root}/src"]\nwrite = ["{root}/out"]\n'
                    '[network]\nmode = "proxy"\nhosts = ["api.github.com"]\n'
                    f'[agent]\nname = "main"\nfiles = "{root}/files"\n')
    return spec


def mac_line(policy: Policy, command: list[str]) -> list[str]:
    return mac_parts(policy, command)[0]


def test_wrap_platform_macos_prints_the_line_and_json_the_same_argv(tmp_path: Path) -> None:
    env = {**os.environ, **_settings_env(tmp_path)}
    spec = _spec(tmp_path)
    command = [LNK_SANDBOX, "wrap", "--platform", "macos", "--spec", str(spec)]
    shown = subprocess.run([*command, "--", "/bin/echo", "hi"], env=env, capture_output=True,
                           text=True, check=True, timeout=60)
    as_json = subprocess.run([*command, "--json", "--", "/bin/echo", "hi"], env=env,
                             capture_output=True, text=True, check=True, timeout=60)
    argv = json.loads(as_json.stdout)
    assert shlex.split(shown.stdout) == argv
    assert argv[:2] == ["/usr/bin/sandbox-exec", "-p"]
    assert "a-distinctive-folder" not in argv[2]
    assert any("a-distinctive-folder" in word for word in argv if word.startswith("-D"))
    assert argv[-2:] == ["/bin/echo", "hi"] and "/usr/bin/env" in argv
    assert "HTTPS_PROXY=http://127.0.0.1:40781" in argv
    rules = evaluate(argv[2], dict(word[2:].split("=", 1) for word in argv
                                   if word.startswith("-D")))
    assert rules.may_connect(40781)
    # The line starts no proxy (nothing inside Seatbelt can be it): stderr says so, after
    # the line, so that what the output begins with is the line (record 0042).
    for done in (shown, as_json):
        assert done.stderr.count("lnk-sandbox: ") == 1
        assert "proxy on 127.0.0.1:40781, which it does not start" in done.stderr
        assert "run --platform macos" in done.stderr
    both = subprocess.run([*command, "--", "/bin/echo", "hi"], env=env, check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)
    assert both.stdout.startswith("/usr/bin/sandbox-exec -p ")
    assert both.stdout.rstrip("\n").endswith("which it does not start: run the command "
                                              "with `lnk-sandbox run --platform macos` (the "
                                              "proxy, the log reader and signals kept outside "
                                              "it), or keep that proxy running while the line "
                                              "runs; until then every call is refused")


def test_wrap_platform_macos_without_a_wire_says_nothing_of_a_proxy(tmp_path: Path) -> None:
    env = {**os.environ, **_settings_env(tmp_path)}
    spec = tmp_path / "none.toml"
    spec.write_text('[network]\nmode = "none"\n')
    done = subprocess.run([LNK_SANDBOX, "wrap", "--platform", "macos", "--spec", str(spec),
                           "--", "/bin/echo", "hi"], env=env, capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.startswith("/usr/bin/sandbox-exec -p ") and done.stderr == ""


def test_wrap_platform_macos_refuses_with_the_reason(tmp_path: Path) -> None:
    env = {**os.environ, **_settings_env(tmp_path)}
    spec = tmp_path / "tcp.toml"
    spec.write_text('name = "db"\n[tcp]\nendpoints = ["db.example.com:5432"]\n')
    done = subprocess.run([LNK_SANDBOX, "wrap", "--platform", "macos", "--spec", str(spec),
                           "--", "/bin/true"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 125 and done.stdout == ""
    assert done.stderr.startswith(f"lnk-sandbox: {spec}: macOS: [tcp] endpoints have no macOS")
    assert done.stderr.count("\n") == 1
    done = subprocess.run([LNK_SANDBOX, "wrap", "--platform", "windows", "--spec", str(spec),
                           "--", "/bin/true"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (
        125, "lnk-sandbox: --platform 'windows': one of linux, macos\n")


def test_check_platform_macos_says_what_is_in_force_and_open() -> None:
    done = subprocess.run([LNK_SANDBOX, "check", "--platform", "macos", "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    found = json.loads(done.stdout)
    assert done.returncode == 1 and not found["ready"] and not found["tested_on_a_mac"]
    names = {item["protection"] for item in found["in_force"]}
    assert {"files", "dot files", "Keychain", "network", "[commands]"} <= names
    assert "never run on a Mac" in {item["gap"] for item in found["open"]}
    shown = subprocess.run([LNK_SANDBOX, "check", "--platform", "macos"], capture_output=True,
                           text=True, timeout=60, check=False).stdout
    assert shown.startswith("macOS: Seatbelt (sandbox-exec); never run on a Mac")


# -- the per-agent port ---------------------------------------------------------------------


def test_main_is_40781_and_every_other_agent_or_wire_keeps_its_own_block(
        tmp_path: Path) -> None:
    settings = str(tmp_path)
    assert seatbelt_ports.block_port(0) == 40781
    main = Policy(settings=settings, agent="main", name="main")
    assert seatbelt_ports.port_for(settings, main) == (40781, (40781,))
    other = Policy(settings=settings, agent="writer", name="writer")
    wire = Policy(settings=settings, name="claude-code")
    assert seatbelt_ports.port_for(settings, other) == (40791, (40781, 40791))
    assert seatbelt_ports.port_for(settings, wire) == (40801, (40781, 40791, 40801))
    assert seatbelt_ports.port_for(settings, other)[0] == 40791  # kept across wraps
    assert (tmp_path / "sandbox" / "macos-ports").read_text() == (
        "agent writer\nwire claude-code\n")
    with pytest.raises(seatbelt_ports.PortsError, match="fixed per agent or wire"):
        seatbelt_ports.port_for(settings, Policy(settings=settings))
    last = seatbelt_ports.MAX_BLOCKS - 1
    assert seatbelt_ports.block_port(last) <= 65535
    with pytest.raises(seatbelt_ports.PortsError, match="at most"):
        seatbelt_ports.block_port(last + 1)


def test_the_agents_proxy_argv_listens_on_its_port(tmp_path: Path) -> None:
    policy = _agent_policy("/Users/u", str(tmp_path), **MADE["agent_verbs"])
    argv = proxy_argv(policy, 40781, "main")
    assert argv[-2:] == ["--listen", "127.0.0.1:40781"]
    assert argv[argv.index("--wire") + 1] == "main"
    assert "--local-model" in argv and "--tool" in argv and "--open-pages" in argv


def test_mac_line_refuses_a_command_env_would_misread(tmp_path: Path) -> None:
    policy = Policy(settings=str(tmp_path))
    for command in (["-i", "x"], ["A=B", "x"]):
        with pytest.raises(MacosError, match="/usr/bin/env would read it"):
            mac_line(policy, command)


def test_spec_errors_stay_spec_errors(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text("[files]\nread = [1]\n")
    with pytest.raises(SpecError):
        load_spec(spec, _settings_env(tmp_path))


def test_check_platform_macos_with_a_spec_says_whether_it_has_a_profile(
        tmp_path: Path) -> None:
    env = {**os.environ, **_settings_env(tmp_path)}
    refused = tmp_path / "tcp.toml"
    refused.write_text('name = "db"\n[tcp]\nendpoints = ["db.example.com:5432"]\n')
    for spec, has in ((EXAMPLES / "demo.toml", True), (refused, False)):
        done = subprocess.run([LNK_SANDBOX, "check", "--platform", "macos", "--json",
                               "--spec", str(spec)], env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        found = json.loads(done.stdout)["spec"]
        assert (found["file"], found["macos"]) == (str(spec), has)
        assert has or found["why"].startswith("[tcp] endpoints have no macOS equivalent")
    assert not (tmp_path / "lnk" / "sandbox" / "macos-ports").exists()  # a check gives none


def test_lan_is_reached_through_the_proxy_variables(tmp_path: Path) -> None:
    policy = Policy(settings=str(tmp_path), name="printer", lan=("192.168.1.20:631",))
    argv = mac_line(policy, ["/usr/bin/lp"])
    assert "HTTP_PROXY=http://127.0.0.1:40791" in argv
    rules = evaluate(argv[2], dict(word[2:].split("=", 1) for word in argv
                                   if word.startswith("-D")))
    assert rules.may_connect(40791) and not rules.may_connect(631)


def test_the_machines_secrets_stay_closed_whatever_the_spec_grants(tmp_path: Path) -> None:
    policy = Policy(settings="/Users/u/.config/lnk", read=("/etc", "/private/var/db"))
    rules = _evaluated(policy, tmp_path)
    assert rules.may_read("/private/etc/hosts")
    for path in ("/private/etc/master.passwd", "/private/etc/sudoers.d/x",
                 "/private/var/db/dslocal/nodes/Default/users/u.plist",
                 "/private/etc/ssh/ssh_host_ed25519_key"):
        assert not rules.may_read(path), path
    assert rules.may_read("/private/etc/ssh/ssh_host_ed25519_key.pub")
    home = _evaluated(Policy(settings="/Users/u/.config/lnk", read=("/Users/u",)), tmp_path)
    assert home.may_read("/Users/u/Library/Preferences/x.plist")
    assert not home.may_read("/Users/u/Library/Keychains/login.keychain-db")
    assert not home.may_read("/Library/Keychains/System.keychain")


# -- [files] read_home: the person's home folder read, what the policy closes in it closed ----

# A home folder as a person's is: a file, a hidden folder with a reopen, a written
# project, Link's settings with the agent's own folder and another's.
_HOME_TREE = (".ssh", "src/app/.git", ".config/lnk/secrets",
              ".config/lnk/agents/main", ".config/lnk/agents/other")
_HOME_FILES = ("notes.txt", ".ssh/id_ed25519", ".ssh/known_hosts", "src/app/main.py",
               "src/app/.git/config",
               ".config/lnk/secrets/anthropic", ".config/lnk/agents/other/url-secret",
               ".config/lnk/agents/main/config.toml")
_READ_HOME_SPEC = """[agent]
name = "main"
[files]
read_home = true
write = ["~/src/app"]
hide = ["~/.ssh"]
reopen = ["~/.ssh/known_hosts"]
[network]
mode = "proxy"
hosts = ["api.github.com"]
"""


def _read_home_policy(tmp_path: Path) -> tuple[Policy, Path]:
    """The spec above as the loader reads it, the person's home folder a tree in tmp."""
    person = tmp_path.resolve() / "u"
    for folder in _HOME_TREE:
        (person / folder).mkdir(parents=True)
    for file in _HOME_FILES:
        (person / file).write_text("x")
    spec = person / "spec.toml"
    spec.write_text(_READ_HOME_SPEC)
    env = {"HOME": str(person), "LNK_HOME": str(person / ".config/lnk")}
    return load_spec(spec, env, person_home=str(person)), person


def test_read_home_profile_golden(tmp_path: Path) -> None:
    policy, person = _read_home_policy(tmp_path)
    assert policy.read == (str(person),)

    def moved(path: str) -> str:
        return "/Users/u" + path[len(str(person)):] if _inside_of(path, str(person)) else path
    changes: dict[str, object] = {
        name: tuple(moved(path) for path in getattr(policy, name))
        for name in ("read", "write", "hide", "reopen", "write_dot_files", "commands")}
    golden = policy.replace(settings=moved(policy.settings), home=moved(policy.home),
                            spec=moved(policy.spec), **changes)
    made, argv = _made(golden, str(tmp_path))
    _golden("read_home_agent", _as_golden(made, argv))
    rules = evaluate(made.text, dict(made.parameters))
    assert rules.may_read("/Users/u/notes.txt") and not rules.may_write("/Users/u/notes.txt")
    # A Mac's Keychains in the home folder: closed after the tree, whatever it grants.
    assert not rules.may_read("/Users/u/Library/Keychains/login.keychain-db")
    assert rules.may_read("/Users/u/Library/Preferences/x.plist")


def test_F2_F6_read_home_means_the_same_on_both(tmp_path: Path) -> None:
    """read_home: the home folder read, never written; the hide, Link's settings and the
    other agent's folder in it closed; the reopen, the written folder and the agent's own
    given again after it: on the Mac (deepest last) as on Linux (mounted after)."""
    policy, person = _read_home_policy(tmp_path)
    found = find(policy, {"HOME": str(person)})
    held = {*found.held, *found.standins}
    made = profile(policy, proxy_port=40781, system=())
    rules = evaluate(made.text, dict(made.parameters))
    expected = {
        "notes.txt": (True, False), "spec.toml": (True, False), "new": (True, False),
        ".ssh/id_ed25519": (False, False), ".ssh/known_hosts": (True, False),
        "src/app/main.py": (True, True), "src/app/.git/config": (True, False),
        ".config/lnk/secrets/anthropic": (False, False),
        ".config/lnk/agents/other/url-secret": (False, False),
        ".config/lnk/agents/main/config.toml": (True, True),
    }
    for rest, (readable, writable) in expected.items():
        path = str(person / rest)
        mac = (rules.may_read(mac_path(path)), rules.may_write(mac_path(path)))
        assert _linux(policy, path, held) == mac == (readable, writable), rest


def test_the_argv_is_built_from_typed_options() -> None:
    assert Parameter("WRITE_0", "/a=b c").to_args() == ["-DWRITE_0=/a=b c"]
    assert ProfileText("(version 1)").to_args() == ["-p", "(version 1)"]
    assert Command(["-x", "y"]).to_args() == ["--", "-x", "y"]
    for name, value in (("write_0", "/a"), ("A B", "/a"), ("", "/a"), ("A", "/a\0b")):
        with pytest.raises(MacosError):
            Parameter(name, value)
    with pytest.raises(MacosError, match="no command"):
        sandbox_exec_argv(Profile("(version 1)", ()), [])


def test_url_platform_macos_is_the_agents_port_with_the_same_secret(tmp_path: Path) -> None:
    env = {**os.environ, **_settings_env(tmp_path)}

    def url(*words: str) -> dict[str, str]:
        done = subprocess.run([LNK_SANDBOX, "url", *words, "--json"], env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        found: dict[str, str] = json.loads(done.stdout)
        return found

    linux, mac = url("--agent", "main"), url("--agent", "main", "--platform", "macos")
    secret = linux["LNK_SANDBOX_URL"].rsplit("/", 1)[1]
    assert mac["LNK_SANDBOX_URL"] == f"http://127.0.0.1:40781/_link/s/{secret}"
    assert mac["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:40781/_link/model/anthropic"
    assert mac["ANTHROPIC_API_KEY"] == linux["ANTHROPIC_API_KEY"]
    assert url("--agent", "writer", "--platform", "macos")["LNK_SANDBOX_URL"].startswith(
        "http://127.0.0.1:40791/_link/s/")
    done = subprocess.run([LNK_SANDBOX, "url", "--platform", "macos"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (125, "lnk-sandbox: url --platform macos needs "
                                              "--agent=NAME or --spec=FILE: the port is the "
                                              "agent's\n")


def test_F6_no_link_in_links_settings_is_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    settings = tmp_path / "lnk"
    settings.mkdir()
    (settings / "sandbox").symlink_to(elsewhere)
    with pytest.raises(seatbelt_ports.PortsError, match="refused, nothing followed"):
        seatbelt_ports.port_for(str(settings), Policy(settings=str(settings), name="w"))
    (settings / "agents").symlink_to(elsewhere)
    env = {**os.environ, **_settings_env(tmp_path)}
    done = subprocess.run([LNK_SANDBOX, "wrap", "--platform", "macos", "--spec",
                           str(_spec(tmp_path)), "--", "/bin/true"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 125 and done.stdout == "", done.stderr
    assert list(elsewhere.iterdir()) == []  # nothing made through either link


_NESTED = st.lists(st.sampled_from(("a", "b", ".git")), min_size=1, max_size=3).map(
    lambda parts: "/n/" + "/".join(parts))


@st.composite
def _nested_policies(draw: st.DrawFn) -> Policy:
    """Policies whose paths nest in one small tree, so grants, hides and reopens meet."""
    write = draw(st.lists(_NESTED, max_size=3, unique=True))
    read = [path for path in draw(st.lists(_NESTED, max_size=3, unique=True))
            if path not in write]
    hide = draw(st.lists(_NESTED, max_size=2, unique=True))
    reopen = [path for path in draw(st.lists(_NESTED, max_size=2, unique=True))
              if any(path.startswith(hidden + "/") for hidden in hide)
              and any(_inside_of(path, granted) for granted in (*read, *write))]
    # A hide inside a reopen: access_at answers it given back, the mount plan hides it
    # (test_a_hide_inside_a_reopen_is_hidden_on_both); compared there, not here.
    assume(not any(_inside_of(hidden, again) for hidden in hide for again in reopen))
    return Policy(settings="/s/lnk", read=tuple(read), write=tuple(write), hide=tuple(hide),
                  reopen=tuple(reopen), write_dot_files=tuple(write))


def _inside_of(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


@fuzz(4)
@given(_nested_policies(), _NESTED)
def test_the_evaluator_agrees_with_the_linux_backend_on_any_nested_policy(
        policy: Policy, path: str) -> None:
    made = profile(policy, proxy_port=None, system=(), secrets=())
    rules = evaluate(made.text, dict(made.parameters))
    assert _linux(policy, path, set()) == (rules.may_read(path), rules.may_write(path))


def test_a_hide_inside_a_reopen_is_hidden_on_both() -> None:
    """bwrap.access_at answers a path hidden inside a reopen as given back; the mount plan
    mounts the deeper hide after the reopen, so Linux hides it, and so does the Mac."""
    policy = Policy(settings="/s/lnk", read=("/n/a",), hide=("/n/a", "/n/a/a/a"),
                    reopen=("/n/a/a",))
    facts = HostFacts(system_dirs=(), system_links=(), system_hidden=(),
                      hide_kinds={"/n/a": "dir", "/n/a/a/a": "dir", "/s/lnk": "dir"})
    argv = plan(policy, facts).bwrap_argv("bwrap")
    reopened = argv.index("--ro-bind", argv.index("/n/a/a") - 2)
    hidden = argv.index("--tmpfs", reopened) + 1
    assert argv[reopened + 1:reopened + 3] == ["/n/a/a", "/n/a/a"]
    assert argv[hidden] == "/n/a/a/a"  # the deeper hide, mounted after the reopen
    assert access_at(policy, facts, "/n/a/a/a/x") == Access.READ  # access_at's answer
    made = profile(policy, proxy_port=None, system=(), secrets=())
    rules = evaluate(made.text, dict(made.parameters))
    assert not rules.may_read("/n/a/a/a/x") and rules.may_read("/n/a/a/x")


def test_agents_wrapped_at_once_each_get_a_block_of_their_own(tmp_path: Path) -> None:
    code = ("import sys; from lnk_common.policy import Policy; "
            "from lnk_wrap.seatbelt_ports import port_for; "
            "print(port_for(sys.argv[1], Policy(settings=sys.argv[1], agent=sys.argv[2], "
            "name=sys.argv[2]))[0])")
    started = [subprocess.Popen([VENV_PYTHON, "-c", code, str(tmp_path), f"agent{index}"],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
               for index in range(8)]
    ports = [int(process.communicate(timeout=60)[0]) for process in started]
    assert sorted(ports) == [40791 + 10 * index for index in range(8)]
    lines = (tmp_path / "sandbox" / "macos-ports").read_text().splitlines()
    assert sorted(lines) == sorted(f"agent agent{index}" for index in range(8))


def test_the_profile_reader_takes_any_cut_or_says_why() -> None:
    made = profile(_agent_policy("/Users/u", GOLDEN_SETTINGS), proxy_port=40781)
    for cut in range(0, len(made.text), 7):
        try:
            parse(made.text[:cut])
        except SbplError:
            continue
    parse(made.text + "\n; a comment\n")


def test_check_says_a_spec_with_a_wire_but_no_name_has_no_port_on_a_mac() -> None:
    found = check_macos.report(Policy(settings="/s", network="proxy"))["spec"]
    assert not found["macos"] and "fixed per agent or wire" in found["why"]
    assert check_macos.report(Policy(settings="/s", name="w", network="proxy"))["spec"]["macos"]


# Every operation and filter the profiles use, each read in a peer's or Apple's public
# profile (record 0042, "Why"): a name outside these is a typo no Mac has checked.
KNOWN_OPERATIONS = {
    "default", "process-fork", "signal", "process-info*", "user-preference-read",
    "ipc-posix-sem", "sysctl-read", "mach-lookup", "pseudo-tty", "file-read*", "file-write*",
    "file-ioctl", "file-write-data", "process-exec*", "file-read-metadata",
    "file-write-unlink", "network*", "network-outbound", "network-bind", "network-inbound"}
KNOWN_FILTERS = {
    "target", "sysctl-name", "global-name", "literal", "subpath", "regex", "param",
    "string-append", "remote", "local", "with"}


def _names(form: object, operations: set[str], filters: set[str]) -> None:
    if not isinstance(form, list):
        return
    head = form[0]
    if head in ("allow", "deny"):
        operations.update(str(item) for item in form[1:] if isinstance(item, Symbol))
    elif head != "version":
        filters.add(str(head))
    for item in form[1:]:
        _names(item, operations, filters)


def test_every_operation_and_filter_is_one_a_peer_uses() -> None:
    operations: set[str] = set()
    filters: set[str] = set()
    goldens = sorted(GOLDEN.glob("*.json"))
    assert len(goldens) == len(MATRIX_SPECS) + len(MADE) + 1  # and read_home_agent
    for path in goldens:
        for form in parse("\n".join(json.loads(path.read_text()).get("profile", []))):
            _names(form, operations, filters)
    assert operations - KNOWN_OPERATIONS == set()
    assert filters - KNOWN_FILTERS == set()


@st.composite
def _ways_out(draw: st.DrawFn) -> Policy:
    network = draw(st.sampled_from(("none", "proxy")))
    ports = draw(st.lists(st.integers(1, 65535), max_size=4, unique=True))
    cut = draw(st.integers(0, len(ports)))
    return Policy(settings="/s/lnk", name="wire", network=network,
                  hosts=("example.org",) if network == "proxy" else (),
                  localhost_ports=tuple(ports[:cut]), local_models=tuple(ports[cut:]),
                  models=tuple(draw(st.sets(st.sampled_from(("anthropic", "openai"))))),
                  open_pages=draw(st.booleans()),
                  lan=("192.168.1.20:631",) if draw(st.booleans()) else ())


@fuzz(2)
@given(_ways_out(), st.integers(1, 65535))
def test_N1_a_port_is_reached_only_when_the_policy_names_it(policy: Policy, port: int) -> None:
    proxy = 40791 if policy.needs_proxy() else None
    made = profile(policy, proxy_port=proxy, agent_ports=(40781, 40791))
    rules = evaluate(made.text, dict(made.parameters))
    expected = port == proxy or port in policy.localhost_ports
    assert rules.may_connect(port) == expected
    for named in (*policy.local_models, 40781):
        assert not rules.may_connect(named) or named in policy.localhost_ports
    assert not rules.may_listen(40781) and not rules.may_listen(40791)
    assert rules.may_listen(port) == (policy.open_pages and port not in (40781, 40791))


def test_on_a_mac_check_compiles_the_profile_and_says_what_sandbox_exec_said(
        tmp_path: Path) -> None:
    """No Mac here: sandbox-exec is a fake (one that runs the command, one that refuses
    the profile as the compiler would), and the report is asked as on a Mac."""
    takes = tmp_path / "takes"
    takes.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
    refuses = tmp_path / "refuses"
    refuses.write_text("#!/bin/sh\necho 'sandbox-exec: unbound variable: file-link' >&2\n"
                       "exit 65\n")
    for fake in (takes, refuses):
        fake.chmod(0o755)
    found = check_macos.report(on_a_mac=True, sandbox_exec=str(takes))
    assert found["ready"] and found["profile_compiles"] and "why" not in found
    found = check_macos.report(Policy(settings="/s", name="w", network="proxy"),
                               on_a_mac=True, sandbox_exec=str(refuses))
    assert not found["ready"] and not found["profile_compiles"]
    assert found["why"] == "sandbox-exec: unbound variable: file-link"
    assert "refuses the profile: sandbox-exec: unbound variable" in check_macos.show(found)
    assert not check_macos.report(on_a_mac=True, sandbox_exec=str(tmp_path / "none"))["ready"]
