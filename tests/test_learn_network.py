"""`lnk-sandbox learn` for the network (lnk_wrap.learn, lnk_wrap.learn_network): the hosts
a run was refused by name, offered as `[network] hosts`, names under one domain grouped
and marked, a provider's API host never offered; names looked up for `[tcp] endpoints`.

The core is fed log lines as the proxy writes them; the rest runs the real thing: a real
sandbox and proxy, Python's urllib, `pip install` and `npm install` against a package
index named on the test network, and a harness of examples/harnesses (Codex, whose
refusals docs/decisions/0009-harness-recipes.md tabulates) against the fake providers.
Nothing here reaches a real registry: the indexes are test names, refused or served by
the test network's origin.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lnk_proxy.model_rules import PROVIDER_HOSTS
from lnk_wrap.learn_network import (
    Offer,
    format_network,
    group,
    run_lines,
    seen_on_wire,
)
from lnk_wrap.spec import is_host_entry
from tests.conftest import LNK_SANDBOX, RunSandbox, WriteSpec, fuzz, toml_list, wire_log_of
from tests.test_harnesses import (
    HARNESS_TIMEOUT_SECONDS,
    HARNESSES,
    Harness,
    copy_recipe,
    settings_with_key,
)
from tests.testnet import NPM_PACKAGE, NPM_REGISTRY
from tests.testservers import DNS_SERVER

NOT_IN_HOSTS = "is not in this sandbox's hosts"
NOT_A_NAME = "is not a name this sandbox may reach"


def _line(event: str, target: str, detail: str) -> str:
    return f"2026-12-04T23:00:00.000Z\t{event}\t{target}\t{detail}"


def _refused(target: str, reason: str = "", kind: str = "") -> str:
    return _line("refused", target, f"{kind} reason={reason or target + ' ' + NOT_IN_HOSTS}"
                 .lstrip())


def _run(*lines: str, ident: str = "ab12cd34") -> list[str]:
    return [_line("started", "-", f"run={ident} pid=1"), *lines,
            _line("exited", "-", f"run={ident} status=0 seconds=1.0")]


def test_only_the_runs_own_lines_are_read() -> None:
    other = _run(_refused("before.example:443"), ident="00000000")
    mine = _run(_refused("mine.example:443"))
    lines = run_lines([*other, *mine, _refused("after.example:443")], "ab12cd34")
    assert [line["target"] for line in lines] == ["mine.example:443"]


def test_refused_names_are_offered_and_other_refusals_say_why() -> None:
    lines = run_lines(_run(
        _refused("example.org:443"), _refused("example.org:80"),
        _refused("git.example.org:22"),
        _refused("api.anthropic.com:443"),
        _refused("169.254.169.254:80", "169.254.169.254 is a cloud metadata service"),
        _refused("127.0.0.1:8080"),
        _refused("localhost:3000"),
        _refused('bad"name.example:443'),
        _refused("listed.example:443"),
        _refused("db.example.net", "db.example.net " + NOT_A_NAME, "kind=dns type=A"),
        _refused("forge.example", "forge.example " + NOT_A_NAME, "kind=dns type=A"),
        _refused("pg.example.net", "pg.example.net " + NOT_A_NAME, "kind=dns type=A"),
        _refused("example.org", "example.org " + NOT_A_NAME, "kind=dns type=A"),
        _refused("dns-for-learn.invalid", "x " + NOT_A_NAME, "kind=dns type=A"),
        _refused("dns-for-learn.invalid:9", "dns-for-learn.invalid could not be looked up"),
        _refused("4.3.2.1.in-addr.arpa", "x " + NOT_A_NAME, "kind=dns type=PTR"),
        _line("refused", "*", "kind=dns type=A more=7 seconds=10 reason=… and 7 more"),
        _line("paused", "-", "reason=too many refusals"),
    ), "ab12cd34")
    seen = seen_on_wire(lines, hosts=("listed.example", "forge.example"),
                        endpoints=("pg.example.net:5432",), ignore=("dns-for-learn.invalid",))
    assert seen.hosts == ["example.org", "git.example.org:22"]
    # example.org was called through the proxy, pg.example.net is an endpoint already;
    # forge.example is in hosts, but was looked up and never called through the proxy.
    assert seen.looked_up == ["db.example.net", "forge.example"]
    assert seen.folded == 7
    assert seen.paused == "too many refusals"
    why = dict(seen.not_offered)
    assert 'use [verbs] model = ["anthropic"] instead' in why["api.anthropic.com:443"]
    assert why["169.254.169.254:80"] == "169.254.169.254 is a cloud metadata service"
    assert "loopback" in why["127.0.0.1:8080"]
    assert "[localhost] ports" in why["localhost:3000"]
    assert why['bad"name.example:443'] == "not a host name the spec takes"
    assert not [target for target in why if "dns-for-learn" in target]  # learn's own


def test_names_under_one_domain_are_grouped_never_over_a_provider_or_a_registry_suffix(
) -> None:
    offers = group(["a.pkgs.example.net", "example.org", "b.pkgs.example.net",
                    "x.example.org:8080", "storage.googleapis.com", "www.googleapis.com",
                    "shop.co.uk", "bank.co.uk", "a.b.example.com:22", "c.b.example.com:443"])
    assert offers == [
        Offer("*.pkgs.example.net", ("a.pkgs.example.net", "b.pkgs.example.net")),
        Offer("example.org", ("example.org",)),
        Offer("x.example.org:8080", ("x.example.org",)),
        # *.googleapis.com would hold generativelanguage.googleapis.com, Gemini's API.
        Offer("storage.googleapis.com", ("storage.googleapis.com",)),
        Offer("www.googleapis.com", ("www.googleapis.com",)),
        Offer("shop.co.uk", ("shop.co.uk",)),
        Offer("bank.co.uk", ("bank.co.uk",)),
        Offer("a.b.example.com:22", ("a.b.example.com",)),  # not the same port
        Offer("c.b.example.com:443", ("c.b.example.com",)),
    ]


def test_format_network_golden() -> None:
    offers = group(["example.org", "a.pkgs.example.net", "b.pkgs.example.net"])
    assert format_network(("api.github.com",), offers, ["db.example.net"], mode="none") == (
        '[network]\n'
        'mode = "proxy"   # was \'none\': hosts need the proxy\n'
        'hosts = [\n'
        '    "api.github.com",       # listed\n'
        '    "example.org",          # new\n'
        '    "*.pkgs.example.net",   # new; a wildcard: opens every name under '
        'pkgs.example.net, more than the run tried (a.pkgs.example.net, b.pkgs.example.net)\n'
        ']\n'
        '# [tcp] endpoints: names the run looked up and was refused, and never called '
        'through the proxy;\n'
        '# an endpoint names its port, which a lookup does not show: add each as '
        '"NAME:PORT"\n'
        '#   db.example.net')
    assert format_network((), [], [], mode="proxy") == (
        "# [network]: the run was refused no host an entry would open")


# Targets as a program may ask for them: names, ports, any character the log keeps.
_TARGET_TEXT = st.text(alphabet=st.sampled_from(
    "abcdefghijklmnopqrstuvwxyz0123456789.-_*:[]\"'\\ #=\u00e9"), max_size=40)
_REASONS = st.sampled_from([NOT_IN_HOSTS, NOT_A_NAME, "is a cloud metadata service",
                            "is this machine (loopback)", ""])


@fuzz(3)
@given(st.lists(st.tuples(_TARGET_TEXT, st.sampled_from(["", "kind=dns type=A"]), _REASONS),
                max_size=12),
       st.sampled_from(["", "api.openai.com", "generativelanguage.googleapis.com"]))
@example([("a.x.example.com:443", "", NOT_IN_HOSTS),
          ("b.x.example.com:443", "", NOT_IN_HOSTS),
          ("storage.googleapis.com:443", "", NOT_IN_HOSTS),
          ('q"uote.example:80', "", NOT_IN_HOSTS),
          ("db.example.net", "kind=dns type=A", NOT_A_NAME)],
         "generativelanguage.googleapis.com")
def test_whatever_was_refused_only_entries_the_spec_takes_are_offered_and_it_parses(
    refusals: list[tuple[str, str, str]], provider: str
) -> None:
    """Any refused targets, as the log would hold them: learn never raises, offers only
    entries the spec loader takes as written and never a provider's host nor a wildcard
    over one, and what it prints is TOML."""
    lines = [_refused(target or "-", f"{target} {reason}".strip(), kind)
             for target, kind, reason in refusals]
    if provider:
        lines.append(_refused(provider + ":443"))
    seen = seen_on_wire(run_lines(_run(*lines), "ab12cd34"))
    offers = group(seen.hosts)
    providers = set(PROVIDER_HOSTS.values())
    for offer in offers:
        assert is_host_entry(offer.entry), offer
        name = offer.entry.partition(":")[0]
        assert name not in providers
        assert not any(host.endswith(name.removeprefix("*")) for host in providers
                       if name.startswith("*."))
    assert all(is_host_entry(name) for name in seen.looked_up)
    text = format_network((), offers, seen.looked_up, mode="none")
    parsed = tomllib.loads(text)
    assert [offer.entry for offer in offers] == parsed.get("network", {}).get("hosts", [])


def _body(stdout: str) -> dict[str, Any]:
    """What learn printed, after the command's own output, is TOML a person can paste:
    it parses whole."""
    return tomllib.loads("# lnk-sandbox learn:" + stdout.split("# lnk-sandbox learn:")[-1])


URLS = """
import socket, sys, urllib.request
for url in {urls!r}:
    try:
        urllib.request.urlopen(url, timeout=10)
    except Exception as error:
        print(url, error, file=sys.stderr)
for name in {names!r}:
    try:
        socket.create_connection((name, 5432), timeout=5)
    except OSError as error:
        print(name, error, file=sys.stderr)
"""


def test_learn_offers_the_hosts_a_run_was_refused_and_writes_nothing(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path, lnk_home: Path
) -> None:
    """A spec of no network: the run gets a wire with no host, so each call is refused
    and logged; learn offers the names (grouped, marked), the name looked up for an
    endpoint, and says the provider's host is the model verb's; the spec is unchanged."""
    script = tmp_path / "calls.py"
    script.write_text(URLS.format(
        urls=["https://example.org/", "https://a.pkgs.example.net/simple/",
              "https://b.pkgs.example.net/simple/", "http://git.example.org:8080/",
              "https://api.openai.com/v1/responses"],
        names=["db.example.net"]))
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    before = spec.read_bytes()
    learned = run_sandbox(spec, "/usr/bin/python3", str(script),
                          verb="learn")
    assert learned.returncode == 0, learned.stderr
    body = _body(learned.stdout)
    assert body["network"] == {"mode": "proxy", "hosts": [
        "example.org", "*.pkgs.example.net", "git.example.org:8080"]}
    assert "# new; a wildcard: opens every name under pkgs.example.net, more than the run " \
           "tried (a.pkgs.example.net, b.pkgs.example.net)" in learned.stdout
    assert "#   db.example.net" in learned.stdout
    assert ("not offered: api.openai.com:443: the openai model provider's API: use "
            '[verbs] model = ["openai"] instead') in learned.stderr
    assert "api.openai.com" not in learned.stdout
    assert spec.read_bytes() == before
    # Nothing left of the run in Link's settings but its wire's log.
    assert list((lnk_home / "sandbox" / "learn").iterdir()) == []


def test_a_spec_with_hosts_keeps_them_listed_and_offers_only_what_was_refused(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path
) -> None:
    script = tmp_path / "calls.py"
    script.write_text(URLS.format(urls=["https://api.github.com/", "https://example.org/"],
                                  names=[]))
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n"
                      '[network]\nmode = "proxy"\nhosts = ["api.github.com"]\n')
    learned = run_sandbox(spec, "/usr/bin/python3", str(script),
                          verb="learn")
    assert learned.returncode == 0, learned.stderr
    network = _body(learned.stdout)["network"]
    assert network == {"mode": "proxy", "hosts": ["api.github.com", "example.org"]}


def test_a_named_spec_with_its_own_home_learns_on_a_wire_of_its_own(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path, lnk_home: Path
) -> None:
    """A recipe's shape (a name, [files] home): learn's refusals are never on the named
    wire's log, so they never count toward its pause."""
    script = tmp_path / "calls.py"
    script.write_text(URLS.format(urls=["https://example.org/"], names=[]))
    home = tmp_path / "home"
    home.mkdir()
    spec = write_spec(f'name = "recipe"\n[files]\nread = {toml_list(tmp_path)}\n'
                      f"write = {toml_list(home)}\nhome = {json.dumps(str(home))}\n"
                      '[network]\nmode = "proxy"\n')
    learned = run_sandbox(spec, "/usr/bin/python3", str(script), verb="learn")
    assert learned.returncode == 0, learned.stderr
    assert _body(learned.stdout)["network"]["hosts"] == ["example.org"]
    assert not (lnk_home / "sandbox" / "wires" / "recipe").exists()


def test_a_spec_of_the_machines_network_has_no_wire_to_learn_from(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path
) -> None:
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n[network]\nmode = \"host\"\n")
    learned = run_sandbox(spec, "/usr/bin/true", verb="learn")
    assert learned.returncode == 0, learned.stderr
    assert "# [network]: mode 'host' has no wire: no call was seen" in learned.stdout


# The package indexes, on the test network: tests/testnet.py serves a tiny PEP 503 index
# with one real wheel (lnktpkg) at allowed.lnkt/simple/, and a minimal npm registry with
# one real package tarball (lnktpkg 1.0.0) at other.lnkt/npm/. Each is refused by name
# while unlisted (no lookup is made for a name not listed); once listed, the proxy
# reaches it and the package is installed in the written folder.
def _pip(work: Path) -> tuple[str, ...]:
    return ("/usr/bin/python3", "-m", "pip", "--isolated", "install", "--no-cache-dir",
            "--retries", "0", "--timeout", "10", "--target", str(work / "site"),
            "--index-url", "http://allowed.lnkt/simple/", "--trusted-host", "allowed.lnkt",
            "lnktpkg")


def _npm(work: Path) -> tuple[str, ...]:
    """npm told every place it would write or ask: the registry on the test network, its
    cache (and its logs) in the written folder, no audit, funding or update check (each
    a call to a registry of its own)."""
    return ("/usr/bin/npm", "install", "--no-audit", "--no-fund", "--no-update-notifier",
            "--fetch-retries", "0", "--cache", str(work / "npm-cache"),
            "--prefix", str(work), "--registry", NPM_REGISTRY, NPM_PACKAGE)


def _installed(tool: str, work: Path) -> bool:
    """The package as the tool installs it: pip's wheel, npm's tarball, unpacked."""
    if tool == "pip":
        return (work / "site" / "lnktpkg" / "__init__.py").is_file()
    return (work / "node_modules" / NPM_PACKAGE / "package.json").is_file()


@pytest.mark.parametrize(("tool", "host"), [("pip", "allowed.lnkt"), ("npm", "other.lnkt")])
def test_learn_an_install_then_the_offered_host_is_reached(
    tool: str, host: str, write_spec: WriteSpec, run_sandbox: RunSandbox,
    tmp_path: Path, sandbox_env: dict[str, str], testnet: Path,
) -> None:
    """`pip install` and `npm install` from a test index: learn offers the index's host
    and nothing else; with it listed, the same install reaches it through the proxy and
    installs the package (pip the wheel, npm the tarball, its integrity checked), and
    learn offers nothing more."""
    work = tmp_path / "project"
    work.mkdir()
    install = (_pip if tool == "pip" else _npm)(work)
    if not Path(install[0]).exists():
        pytest.fail(f"{install[0]} is not installed here (the test image has it)")
    grants = f"[files]\nread = {toml_list(tmp_path)}\nwrite = {toml_list(work)}\n"
    spec = write_spec(grants + '[network]\nmode = "proxy"\n')
    learned = run_sandbox(spec, *install, cwd=work, verb="learn")
    assert learned.returncode != 0  # the index was refused: nothing to install
    assert _body(learned.stdout)["network"] == {"mode": "proxy", "hosts": [host]}, (
        learned.stdout, learned.stderr[-2000:])
    assert not _installed(tool, work)
    listed = write_spec(grants + f'[network]\nmode = "proxy"\nhosts = ["{host}"]\n')
    wire = f"learn-{tool}"
    done = subprocess.run([LNK_SANDBOX, "run", "--wire", wire, "--spec", str(listed), "--",
                           *install], cwd=str(work), env=sandbox_env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert f"\tallowed\t{host}:80\t" in wire_log_of(sandbox_env, wire), done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    if tool == "pip":
        assert (work / "site" / "lnktpkg" / "__init__.py").read_text() == "VALUE = 42\n"
    else:
        package = json.loads((work / "node_modules" / NPM_PACKAGE / "package.json").read_text())
        assert (package["name"], package["version"]) == (NPM_PACKAGE, "1.0.0")
        assert (work / "node_modules" / NPM_PACKAGE / "index.js").read_text() == (
            "module.exports = 42;\n")
    again = run_sandbox(listed, *install, cwd=work, verb="learn")
    assert _body(again.stdout)["network"] == {"mode": "proxy", "hosts": [host]}
    assert "# new" not in again.stdout.partition("[network]")[2]
    assert "# [network]: the run was refused no host an entry would open" in again.stdout


def test_learn_a_database_client_names_its_endpoint_then_it_reaches_postgres(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path,
    sandbox_env: dict[str, str], testnet: Path,
) -> None:
    """psql by name, in a spec of no network: its lookup is refused by the DNS learn's
    run has (a name looked up, never called through the proxy), so learn names it for
    [tcp] endpoints; with `db.lnkt:5432` listed, psql reaches the test network's
    PostgreSQL by that name."""
    env = {**sandbox_env, "LNK_SANDBOX_DNS": DNS_SERVER}
    psql = ("/usr/bin/psql", "-h", "db.lnkt", "-U", "postgres", "-d", "lnkt", "-tAc",
            "select word from greeting")
    grants = f"[files]\nread = {toml_list(tmp_path)}\n"
    learned = run_sandbox(write_spec(grants), *psql, env=env, verb="learn")
    assert learned.returncode != 0
    assert "\n#   db.lnkt" in learned.stdout, (learned.stdout, learned.stderr[-2000:])
    assert "hosts" not in _body(learned.stdout).get("network", {})
    listed = write_spec(grants + '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    done = run_sandbox(listed, *psql, env=env)
    assert done.stdout.strip() == "hello-from-origin", done.stderr


def _learn_recipe(harness: Harness, recipe: Path, env: dict[str, str],
                  key: str) -> subprocess.CompletedProcess[str]:
    """`learn` over the harness's recipe (proxy.toml), asked to write a file; it ends
    well, and its key is nowhere in what it printed."""
    command = [word if word != "{prompt}" else "lnk-write-file hello.txt learned"
               for word in harness.command]
    learned = subprocess.run([LNK_SANDBOX, "learn", "--spec", str(recipe / "proxy.toml"),
                              "--", *command], cwd=str(recipe / "work"), env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=HARNESS_TIMEOUT_SECONDS, check=False)
    assert learned.returncode == 0, (learned.stdout[-3000:], learned.stderr[-3000:])
    assert key not in learned.stdout + learned.stderr
    return learned


def test_learn_a_harness_recipe_offers_what_it_tried_beside_its_model(
    tmp_path: Path, testnet: Path
) -> None:
    """Codex by its recipe's proxy.toml (no host listed) against the fake OpenAI: learn
    offers what record 0009 saw it refused (github.com, api.github.com, chatgpt.com, as
    many as it gets to), and never its provider's API host, which it reaches through the
    model verb."""
    harness = HARNESSES["codex"]
    recipe = copy_recipe(harness, tmp_path)
    env, key = settings_with_key(harness, tmp_path, testnet)
    learned = _learn_recipe(harness, recipe, env, key)
    hosts = _body(learned.stdout)["network"]["hosts"]
    # Which of these Codex gets to before it exits depends on its own timing (measured:
    # all three, or only github.com, run to run); nothing else is ever offered.
    assert hosts, learned.stdout
    assert set(hosts) <= {"github.com", "api.github.com", "chatgpt.com", "ab.chatgpt.com"}
    assert "api.openai.com" not in learned.stdout.split("# lnk-sandbox learn:")[-1]


def test_learn_a_harness_that_calls_its_provider_directly_is_told_to_use_the_verb(
    tmp_path: Path, testnet: Path
) -> None:
    """Claude Code by its recipe's proxy.toml but without the recipe's settings.json
    (which turns its nonessential traffic off): beside the model verb it calls
    api.anthropic.com itself (record 0009), refused; learn never offers the host, and
    says to use [verbs] model instead."""
    harness = HARNESSES["claude-code"]
    recipe = copy_recipe(harness, tmp_path)
    (recipe / "home" / ".claude" / "settings.json").unlink()
    env, key = settings_with_key(harness, tmp_path, testnet)
    learned = _learn_recipe(harness, recipe, env, key)
    assert "api.anthropic.com" not in _body(learned.stdout).get("network", {}).get("hosts", [])
    assert ("lnk-sandbox: not offered: api.anthropic.com:443: the anthropic model provider's "
            'API: use [verbs] model = ["anthropic"] instead (a hosts entry would open a tunnel '
            "around the verb, its rules and the key it adds outside)") in learned.stderr
