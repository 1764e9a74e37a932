"""The bubblewrap argv and the init's rules, golden-tested whole (argv in, argv out)."""

from __future__ import annotations

import json
from pathlib import Path

from lnk_common.policy import Policy
from lnk_wrap.bwrap import HostFacts, access_at, plan

GOLDEN = Path(__file__).parent / "golden"

AGENT_POLICY = Policy(
    settings="/home/u/.config/lnk",
    read=("/home/u/src",),
    write=("/home/u/src/app", "/home/u/.config/lnk/agents/main"),
    hide=("/home/u/src/app/secrets", "/home/u/.config/lnk/agents"),
    reopen=("/home/u/src/app/secrets/public.pem",),
    name="main",
    spec="/home/u/spec.toml",
)
FACTS = HostFacts(
    system_dirs=("/usr", "/etc"),
    system_links=(("/bin", "usr/bin"), ("/lib", "usr/lib")),
    system_hidden=("/etc/shadow", "/etc/ssl/private"),
    hide_kinds={
        "/home/u/src/app/secrets": "dir",
        "/home/u/.config/lnk/agents": "dir",
        "/home/u/.config/lnk": "dir",
        "/etc/shadow": "file",
        "/etc/ssl/private": "dir",
    },
    runtime=("/usr/lib/python3.11", "/opt/py/bin"),
    packages="/opt/lnk",
    cwd="/home/u/src/app",
    info_fd=4,
    watch_fd=5,
)


def test_plan_golden_agent_policy() -> None:
    planned = plan(AGENT_POLICY, FACTS)
    golden = json.loads((GOLDEN / "plan_agent.json").read_text())
    assert planned.bwrap_argv("/usr/bin/bwrap") == golden["bwrap"]
    assert planned.init_args() == golden["init"]


def test_plan_always_isolates_and_drops_every_capability() -> None:
    argv = plan(Policy(settings="/s"), FACTS).bwrap_argv("bwrap")
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                 "--unshare-uts", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    # /proc/sys read-only after /proc: root without capabilities still owns the sysctls.
    assert argv.index("--proc") < argv.index("/proc/sys")


def test_plan_keep_session_only_for_a_guest_terminal() -> None:
    policy = Policy(settings="/s", keep_session=True)
    assert "--new-session" not in plan(policy, FACTS).bwrap_argv("bwrap")


def test_plan_hide_goes_after_the_grant_that_holds_it_and_reopen_after_that() -> None:
    argv = plan(AGENT_POLICY, FACTS).bwrap_argv("bwrap")
    grant = argv.index("/home/u/src/app")
    hidden = argv.index("/home/u/src/app/secrets")
    reopened = argv.index("/home/u/src/app/secrets/public.pem")
    read_only = len(argv) - 1 - argv[::-1].index("/home/u/src/app/secrets")
    assert grant < hidden < reopened < read_only


def test_plan_skips_a_hide_nothing_made_visible() -> None:
    policy = Policy(settings="/s", hide=("/elsewhere/secret",))
    facts = HostFacts(system_dirs=("/usr",), system_links=(), system_hidden=(),
                      hide_kinds={"/elsewhere/secret": "dir", "/s": "dir"})
    assert "/elsewhere/secret" not in plan(policy, facts).bwrap_argv("bwrap")


def test_plan_does_not_mount_runtime_over_a_written_folder() -> None:
    policy = Policy(settings="/s", write=("/work",))
    facts = HostFacts(system_dirs=("/usr",), system_links=(), system_hidden=(),
                      runtime=("/work/.venv",))
    argv = plan(policy, facts).bwrap_argv("bwrap")
    assert "/work/.venv" not in argv


def test_access_at_deepest_entry_decides() -> None:
    assert access_at(AGENT_POLICY, FACTS, "/home/u/src/x") == "read"
    assert access_at(AGENT_POLICY, FACTS, "/home/u/src/app/x") == "write"
    assert access_at(AGENT_POLICY, FACTS, "/home/u/src/app/secrets/key") is None
    assert access_at(AGENT_POLICY, FACTS, "/home/u/src/app/secrets/public.pem") == "write"
    assert access_at(AGENT_POLICY, FACTS, "/home/u/.config/lnk/agents/other") is None
    assert access_at(AGENT_POLICY, FACTS, "/home/u/.config/lnk/agents/main/x") == "write"
    assert access_at(AGENT_POLICY, FACTS, "/etc/shadow") is None
    assert access_at(AGENT_POLICY, FACTS, "/home/u") is None


def test_plan_holds_dot_files_read_only_and_pins_the_folders_above_nested_ones() -> None:
    policy = Policy(settings="/s", read=("/r",), write=("/w",), hide=("/w/secret",))
    facts = HostFacts(
        system_dirs=("/usr",), system_links=(), system_hidden=(),
        hide_kinds={"/w/secret": "dir", "/s": "dir"},
        held=("/w/.git", "/w/.envrc", "/w/scripts/hooks", "/r/hooks", "/w/secret/.git"),
    )
    argv = plan(policy, facts).bwrap_argv("bwrap")
    mounts = [argv[i:i + 3] for i, word in enumerate(argv) if word in ("--bind", "--ro-bind")]
    assert mounts[-4:] == [
        ["--bind", "/w/scripts", "/w/scripts"],    # pinned: cannot be renamed, still writable
        ["--ro-bind", "/w/.envrc", "/w/.envrc"],
        ["--ro-bind", "/w/.git", "/w/.git"],
        ["--ro-bind", "/w/scripts/hooks", "/w/scripts/hooks"],
    ]
    # Where the program cannot write anyway (read only, hidden), nothing is mounted.
    assert "/r/hooks" not in argv and "/w/secret/.git" not in argv
    # The grant comes first: a held dot file is narrowed inside it.
    assert argv.index("/w") < argv.index("/w/.git")


def test_F8_private_temp_folders_may_make_fifos_unless_a_written_folder_lies_beneath() -> None:
    # Landlock's rights are a union up the path, across mounts: a written folder under
    # /tmp gets what the private /tmp's rule gives, so that rule loses FIFOs then.
    planned = plan(AGENT_POLICY, FACTS)
    rules = planned.init_args()
    assert [rules[i + 1] for i, arg in enumerate(rules) if arg == "--rule"
            and rules[i + 1].split(":")[1] in ("/tmp", "/var/tmp", "/dev/shm")] == [
        "temp:/dev/shm", "temp:/tmp", "temp:/var/tmp"]
    under_tmp = Policy(settings="/home/u/.config/lnk", write=("/tmp/work/w",))
    rules = plan(under_tmp, FACTS).init_args()
    assert "write:/tmp" in rules and "temp:/tmp" not in rules
    assert "temp:/var/tmp" in rules and "temp:/dev/shm" in rules
    assert "write:/tmp/work/w" in rules


def test_plan_proxy_variables_golden_with_node_switch() -> None:
    """Where the proxy variables are set, Node's fetch is told to read them
    (NODE_USE_ENV_PROXY=1), and NO_PROXY names only loopback (the sandbox's own, where
    [localhost] ports are relayed): the head of the argv, whole."""
    argv = plan(Policy(settings="/s", network="proxy", hosts=("example.com",)),
                FACTS).bwrap_argv("bwrap")
    start = argv.index("--info-fd") + 2
    assert argv[start:argv.index("--ro-bind")] == [
        "--setenv", "HTTP_PROXY", "http://127.0.0.1:3128",
        "--setenv", "HTTPS_PROXY", "http://127.0.0.1:3128",
        "--setenv", "ALL_PROXY", "http://127.0.0.1:3128",
        "--setenv", "http_proxy", "http://127.0.0.1:3128",
        "--setenv", "https_proxy", "http://127.0.0.1:3128",
        "--setenv", "all_proxy", "http://127.0.0.1:3128",
        "--setenv", "NODE_USE_ENV_PROXY", "1",
        "--setenv", "NO_PROXY", "localhost,127.0.0.1,::1",
        "--setenv", "no_proxy", "localhost,127.0.0.1,::1",
    ]


def test_plan_binds_the_dns_files_read_only_where_the_system_s_really_are() -> None:
    """A sandbox with DNS gets its resolv.conf and hosts from pipes (--ro-bind-data); one
    of the proxy's network without DNS, the package's own resolv.conf (--ro-bind: no pipe),
    at the path the system's file really is (a link's target, made in the sandbox's
    root); either is readable by the program (the init's rules) and nothing more."""
    policy = Policy(settings="/s", network="proxy", hosts=("example.com",))
    later = FACTS.with_static_files((
        ("/opt/lnk/lnk_wrap/resolv.conf", "/run/systemd/resolve/stub-resolv.conf"),))
    for facts, made in (
            (later, ["--ro-bind", "/opt/lnk/lnk_wrap/resolv.conf",
                     "/run/systemd/resolve/stub-resolv.conf"]),
            (FACTS.with_data_files(((7, "/etc/resolv.conf"), (8, "/etc/hosts"))),
             ["--ro-bind-data", "7", "/etc/resolv.conf", "--ro-bind-data", "8", "/etc/hosts"])):
        planned = plan(policy, facts)
        argv = planned.bwrap_argv("bwrap")
        after_temp = argv.index("/var/tmp", argv.index("--tmpfs")) + 1
        assert argv[after_temp:after_temp + len(made)] == made
        rules = planned.init_args()
        for path in made[2::3]:
            assert f"read:{path}" in rules


def test_plan_of_a_model_verb_alone_sets_no_proxy_variable_and_holds_no_placeholder() -> None:
    """The model verb's variables go in the environment bubblewrap is started with
    (lnk_wrap.model_env), never in its argv, which any user reads in /proc: the argv of
    a model-only policy is that of the same policy without the verb."""
    with_model = Policy(settings="/s", models=("anthropic", "openai"), server_tools=True,
                        agent="main")
    argv = plan(with_model, FACTS).bwrap_argv("bwrap")
    assert argv == plan(Policy(settings="/s", agent="main"), FACTS).bwrap_argv("bwrap")
    assert not any("PROXY" in word or word.startswith("lnk-") or "_link" in word
                   for word in argv)
