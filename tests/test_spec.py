"""The spec loader from the outside: every bad spec is one exact SpecError, every good one
is exactly the Policy it says, and a bad spec given to the real CLI runs nothing."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from lnk_common.policy import Policy
from lnk_wrap.spec import (
    MAX_NAME_CHARACTERS,
    MAX_PATHS_PER_KEY,
    MAX_SPEC_BYTES,
    SpecError,
    is_name,
    load_spec,
    parse_spec,
)
from tests.conftest import LNK_SANDBOX, RunSandbox, WriteSpec, toml_list

EXIT_SANDBOX_FAILED = 125
NAME_REASON = "use letters, digits, '.', '_' and '-'"
SETTINGS_REASON = "lies in Link's settings folder, which no sandbox reads or writes"
WHOLE_FS_REASON = "the whole file system cannot be named; name the folders needed"


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    """tmp_path as the loader will see it: canonical."""
    return tmp_path.resolve()


@pytest.fixture
def env(tmp: Path, lnk_home: Path) -> dict[str, str]:
    """An explicit environment: Link's settings in lnk_home, HOME a folder of the test's."""
    home = tmp / "home"
    home.mkdir()
    return {"LNK_HOME": str(lnk_home), "HOME": str(home)}


def _error(spec: Path, env: dict[str, str]) -> tuple[str, str, str]:
    with pytest.raises(SpecError) as caught:
        load_spec(spec, env)
    error = caught.value
    assert str(error) == (
        f"{error.file}: {error.key}: {error.reason}" if error.key
        else f"{error.file}: {error.reason}"
    )
    return error.file, error.key, error.reason


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- the schema: unknown keys, wrong types, sections not built yet ----------------------


def test_unknown_top_level_key(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("bogus = 1\n")
    assert _error(spec, env) == (
        str(spec), "bogus",
        "unknown key (known: name, [files], [agent], [commands], [network], [tcp], [lan], "
        "[localhost], [verbs], [pause])",
    )


def test_unknown_top_level_table(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("[file]\nread = []\n")
    file, key, reason = _error(spec, env)
    assert (file, key) == (str(spec), "file")
    assert reason.startswith("unknown key (known: name, [files], ")


def test_unknown_key_in_files_is_not_ignored(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("[files]\nred = []\n")
    assert _error(spec, env) == (
        str(spec), "files.red",
        "unknown key (known in [files]: read, write, hide, reopen, write_dot_files, home, "
        "read_home)",
    )


def test_unknown_key_in_agent_is_not_ignored(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[agent]\nnmae = "bob"\n')
    assert _error(spec, env) == (
        str(spec), "agent.nmae", "unknown key (known in [agent]: name, home, files)"
    )


def test_path_list_given_as_a_string(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[files]\nread = "/usr"\n')
    assert _error(spec, env) == (
        str(spec), "files.read", "must be a list of paths, not a string"
    )


def test_path_list_given_as_a_table(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("[files.write]\nx = 1\n")
    assert _error(spec, env) == (str(spec), "files.write", "must be a list of paths, not a table")


@pytest.mark.parametrize(
    ("item", "kind"),
    [("7", "an integer"), ("true", "a boolean"), ("1.5", "a number"), ("[]", "a list"),
     ("{}", "a table"), ("1979-05-27", "date")],
)
def test_non_string_in_path_list_names_its_index(
    write_spec: WriteSpec, env: dict[str, str], item: str, kind: str
) -> None:
    spec = write_spec(f'[files]\nread = ["/usr", {item}]\n')
    assert _error(spec, env) == (str(spec), "files.read[1]", f"must be a path string, not {kind}")


def test_files_not_a_table(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('files = "/usr"\n')
    assert _error(spec, env) == (str(spec), "files", "must be a table ([files]), not a string")


def test_files_as_an_array_of_tables(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("[[files]]\nread = []\n")
    assert _error(spec, env) == (str(spec), "files", "must be a table ([files]), not a list")


def test_name_not_a_string(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("name = 3\n")
    assert _error(spec, env) == (str(spec), "name", "must be a string, not an integer")


def test_agent_name_not_a_string(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("[agent]\nname = [\"bob\"]\n")
    assert _error(spec, env) == (str(spec), "agent.name", "must be a string, not a list")


# --- [verbs]: every verb is built; a key not known is refused ---------------------------------


def test_V1_verbs_open_is_a_boolean_and_turns_the_proxy_on(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    policy = load_spec(write_spec("[verbs]\nopen = true\n"), env)
    assert (policy.open_pages, policy.needs_proxy(), policy.has_wire()) == (True, True, True)
    assert load_spec(write_spec("[verbs]\nopen = false\n"), env).open_pages is False
    spec = write_spec('[verbs]\nopen = "yes"\n')
    assert _error(spec, env) == (str(spec), "verbs.open", "must be true or false, not a string")


def test_V1_an_empty_verbs_section_turns_nothing_on(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    policy = load_spec(write_spec("[verbs]\n"), env)
    assert (policy.models, policy.server_tools, policy.needs_proxy()) == ((), False, False)


def test_verbs_not_a_table(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("verbs = false\n")
    assert _error(spec, env) == (str(spec), "verbs", "must be a table ([verbs]), not a boolean")


def test_verbs_unknown_key(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[verbs]\nmodels = "anthropic"\n')
    assert _error(spec, env) == (str(spec), "verbs.models",
                                 "unknown key (known in [verbs]: model, open, tools, secrets)")


@pytest.mark.parametrize(
    ("value", "models"),
    [
        ('"anthropic"', ("anthropic",)),
        ('["openai"]', ("openai",)),
        ('["anthropic", "openai", "gemini", "openrouter"]',
         ("anthropic", "openai", "gemini", "openrouter")),
        ('["openrouter", "gemini"]', ("openrouter", "gemini")),
    ],
)
def test_verbs_model_names_providers(
    write_spec: WriteSpec, env: dict[str, str], value: str, models: tuple[str, ...]
) -> None:
    """With network "none" too: the proxy then runs for the verb alone."""
    policy = load_spec(write_spec(f"[verbs]\nmodel = {value}\n"), env)
    assert policy.models == models
    assert policy.network == "none"
    assert policy.server_tools is False
    assert policy.needs_proxy() and policy.has_wire()


KNOWN_PROVIDERS = '"anthropic", "openai", "gemini", "openrouter"'


@pytest.mark.parametrize(
    ("value", "key", "reason"),
    [
        ('"claude"', "verbs.model",
         f"'claude' is not a provider the model verb knows ({KNOWN_PROVIDERS})"),
        ('"Anthropic"', "verbs.model",
         f"'Anthropic' is not a provider the model verb knows ({KNOWN_PROVIDERS})"),
        ('["openai", "azure"]', "verbs.model[1]",
         f"'azure' is not a provider the model verb knows ({KNOWN_PROVIDERS})"),
        ('["openai", "anthropic", "openai"]', "verbs.model[2]", "'openai' is named twice"),
        ("[]", "verbs.model",
         f"an empty list turns nothing on; name providers ({KNOWN_PROVIDERS}), or drop the key"),
        ('""', "verbs.model", f"'' is not a provider the model verb knows ({KNOWN_PROVIDERS})"),
        ("true", "verbs.model", "must be a provider or a list of them, not a boolean"),
        ("{ name = \"openai\" }", "verbs.model",
         "must be a provider or a list of them, not a table"),
        ('["openai", 3]', "verbs.model[1]", "must be a provider's name, not an integer"),
        ('[["openai"]]', "verbs.model[0]", "must be a provider's name, not a list"),
    ],
)
def test_verbs_model_refuses_what_is_not_a_list_of_known_providers(
    write_spec: WriteSpec, env: dict[str, str], value: str, key: str, reason: str
) -> None:
    spec = write_spec(f"[verbs]\nmodel = {value}\n")
    assert _error(spec, env) == (str(spec), key, reason)


def test_V3_server_tools_kept_only_when_asked(write_spec: WriteSpec, env: dict[str, str]) -> None:
    policy = load_spec(write_spec('[network]\nserver_tools = true\n[verbs]\nmodel = "gemini"\n'),
                       env)
    assert (policy.models, policy.server_tools) == (("gemini",), True)
    policy = load_spec(write_spec('[network]\nserver_tools = false\n[verbs]\nmodel = "gemini"\n'),
                       env)
    assert policy.server_tools is False


def test_server_tools_without_a_model_verb_is_an_error(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    spec = write_spec('[network]\nmode = "proxy"\nhosts = ["example.com"]\nserver_tools = true\n')
    assert _error(spec, env) == (
        str(spec), "network.server_tools",
        "keeps a hosted model's server-side tools, and no model verb is on: name one in "
        "[verbs] model, or drop the key")


def test_server_tools_false_without_a_model_verb_says_what_is_so(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    """false is what holds anyway: accepted, and it opens nothing."""
    policy = load_spec(write_spec("[network]\nserver_tools = false\n"), env)
    assert (policy.server_tools, policy.needs_proxy()) == (False, False)


@pytest.mark.parametrize(("value", "kind"), [('"true"', "a string"), ("1", "an integer")])
def test_server_tools_must_be_a_boolean(
    write_spec: WriteSpec, env: dict[str, str], value: str, kind: str
) -> None:
    spec = write_spec(f'[network]\nserver_tools = {value}\n[verbs]\nmodel = "openai"\n')
    assert _error(spec, env) == (str(spec), "network.server_tools",
                                 f"must be true or false, not {kind}")


def test_model_verb_takes_the_proxy_port_even_with_network_none(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    spec = write_spec('[localhost]\nports = [3128]\n[verbs]\nmodel = "openai"\n')
    assert _error(spec, env) == (
        str(spec), "localhost.ports",
        "[localhost] port 3128 is the proxy's own port inside the sandbox")
    assert load_spec(write_spec("[localhost]\nports = [3128]\n"), env).localhost_ports == (3128,)


def test_calls_per_minute_counts_model_calls(write_spec: WriteSpec, env: dict[str, str]) -> None:
    policy = load_spec(
        write_spec('[network]\ncalls_per_minute = 60\n[verbs]\nmodel = "anthropic"\n'), env)
    assert (policy.calls_per_minute, policy.models) == (60, ("anthropic",))


def test_an_agent_spec_names_its_agent_for_its_placeholder(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path
) -> None:
    (lnk_home / "agents" / "main").mkdir(parents=True)
    policy = load_spec(write_spec('[agent]\nname = "main"\n[verbs]\nmodel = "anthropic"\n'),
                       env)
    assert (policy.agent, policy.name, policy.models) == ("main", "main", ("anthropic",))
    named = load_spec(write_spec('name = "w"\n[agent]\nname = "main"\n'), env)
    assert (named.agent, named.name) == ("main", "w")
    assert load_spec(write_spec("[verbs]\n"), env).agent == ""


# --- [files] read_home: the person's home folder, as if listed in `read` -----------------


def test_read_home_true_reads_the_persons_home_folder(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    person = _folder(tmp / "person")
    source = _folder(tmp / "src")
    spec = write_spec(f"[files]\nread = {toml_list(source)}\nread_home = true\n")
    assert load_spec(spec, env, person_home=str(person)).read == (str(source), str(person))
    # Named in `read` too: once.
    twice = write_spec(f"[files]\nread = {toml_list(person)}\nread_home = true\n")
    assert load_spec(twice, env, person_home=str(person)).read == (str(person),)


def test_read_home_is_the_password_databases_not_home_nor_files_home(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    """Without `person_home` (every run but a test's), the running user's home folder in
    the password database; env's HOME (tmp/home) and `[files] home` are not it."""
    own = _folder(tmp / "own")
    spec = write_spec(f"[files]\nhome = {toml_list(own)[1:-1]}\nread_home = true\n")
    policy = load_spec(spec, env)
    assert policy.read == (os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir),)
    assert (policy.home, policy.write) == (str(own), (str(own),))


def test_read_home_false_or_absent_reads_nothing(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    person = str(_folder(tmp / "person"))
    for text in ("[files]\nread_home = false\n", "[files]\n"):
        assert load_spec(write_spec(text), env, person_home=person).read == ()


@pytest.mark.parametrize(("value", "kind"), [('"true"', "a string"), ("1", "an integer"),
                                             ("[]", "a list"), ("{}", "a table")])
def test_read_home_not_a_boolean_is_refused(
    write_spec: WriteSpec, env: dict[str, str], value: str, kind: str
) -> None:
    spec = write_spec(f"[files]\nread_home = {value}\n")
    assert _error(spec, env) == (str(spec), "files.read_home", f"must be true or false, not {kind}")


def test_read_home_written_stays_written_and_hides_and_reopens_inside_hold(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    person = _folder(tmp / "person")
    known = person / ".ssh" / "known_hosts"
    _folder(known.parent)
    known.write_text("")
    spec = write_spec(f"[files]\nread_home = true\nhide = {toml_list(known.parent)}\n"
                      f"reopen = {toml_list(known)}\n")
    policy = load_spec(spec, env, person_home=str(person))
    assert (policy.read, policy.hide, policy.reopen) == (
        (str(person),), (str(known.parent),), (str(known),))
    written = write_spec(f"[files]\nwrite = {toml_list(person)}\nread_home = true\n")
    assert load_spec(written, env, person_home=str(person)).read == ()


def test_read_home_inside_links_settings_is_refused(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path
) -> None:
    person = _folder(lnk_home / "person")
    spec = write_spec("[files]\nread_home = true\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec, env, person_home=str(person))
    assert (caught.value.key, caught.value.reason) == (
        "files.read_home", f"{person.resolve()} {SETTINGS_REASON}")


@pytest.mark.parametrize(("home", "reason"), [
    ("missing", "'{tmp}/missing' does not exist"),
    ("file", "the home folder '{tmp}/file' is not a folder"),
    ("relative", "the home folder 'relative' (password database) is not an absolute path"),
    ("/", WHOLE_FS_REASON),
])
def test_read_home_without_a_home_folder_is_refused(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path, home: str, reason: str
) -> None:
    (tmp / "file").write_text("")
    given = home if home in ("relative", "/") else str(tmp / home)
    spec = write_spec("[files]\nread_home = true\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec, env, person_home=given)
    assert (caught.value.key, caught.value.reason) == (
        "files.read_home", reason.format(tmp=tmp))


# --- names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["..", ".", ".hidden", "a/b", "../../etc", "a b", "wire\n", "é", "-x", "x" * 65]
)
def test_bad_name(write_spec: WriteSpec, env: dict[str, str], name: str) -> None:
    spec = write_spec(f"name = {_toml_string(name)}\n")
    assert _error(spec, env) == (str(spec), "name", f"{name!r}: {NAME_REASON}")


@pytest.mark.parametrize("name", ["..", "a/b", "x" * 65, "agents/../../x"])
def test_bad_agent_name(write_spec: WriteSpec, env: dict[str, str], name: str) -> None:
    spec = write_spec(f"[agent]\nname = {_toml_string(name)}\n")
    assert _error(spec, env) == (str(spec), "agent.name", f"{name!r}: {NAME_REASON}")


@hypothesis.settings(max_examples=2000, deadline=None)
@hypothesis.given(st.text(alphabet="aZ09_.-/ \n\x00é٣\uff21", max_size=70) | st.text(max_size=8))
@hypothesis.example("x" * 64)
@hypothesis.example("x" * 65)
@hypothesis.example("٣")
def test_is_name_is_the_name_expression(text: str) -> None:
    """is_name (no `re` at start) is the expression it replaced, character for character."""
    assert is_name(text) == bool(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}", text))


def test_name_at_the_limit(write_spec: WriteSpec, env: dict[str, str]) -> None:
    name = "x" * MAX_NAME_CHARACTERS
    assert load_spec(write_spec(f"name = {_toml_string(name)}\n"), env).name == name


def test_agent_without_name(write_spec: WriteSpec, env: dict[str, str], tmp: Path) -> None:
    home = _folder(tmp / "agent-home")
    spec = write_spec(f"[agent]\nhome = {toml_list(home)[1:-1]}\n")
    assert _error(spec, env) == (str(spec), "agent.name", "an [agent] needs a name")


def test_agent_with_empty_name(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[agent]\nname = ""\n')
    assert _error(spec, env) == (str(spec), "agent.name", "an [agent] needs a name")


def test_agent_whose_folder_does_not_exist(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path
) -> None:
    spec = write_spec('[agent]\nname = "bob"\n')
    folder = lnk_home.resolve() / "agents" / "bob"
    assert _error(spec, env) == (
        str(spec), "agent.name", f"the agent's folder {folder} does not exist"
    )


def test_agent_home_that_does_not_exist(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    missing = tmp / "no-agent-here"
    spec = write_spec(f'[agent]\nname = "bob"\nhome = "{missing}"\n')
    assert _error(spec, env) == (str(spec), "agent.home", f"'{missing}' does not exist")


# --- paths: expansion ----------------------------------------------------------------


def test_tilde_of_a_user_that_does_not_exist(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[files]\nread = ["~nobody_such_user/x"]\n')
    assert _error(spec, env) == (
        str(spec), "files.read[0]", "'~nobody_such_user/x': no user named 'nobody_such_user'"
    )


@pytest.mark.parametrize("home", [None, "", "relative/home"], ids=["unset", "empty", "relative"])
def test_tilde_without_an_absolute_home(
    write_spec: WriteSpec, lnk_home: Path, home: str | None
) -> None:
    env = {"LNK_HOME": str(lnk_home)}
    if home is not None:
        env["HOME"] = home
    spec = write_spec('[files]\nread = ["/usr", "~/x"]\n')
    assert _error(spec, env) == (
        str(spec), "files.read[1]", "'~/x': HOME is not set to an absolute path"
    )


@pytest.mark.parametrize("raw", ["../x", "..", "sub/../../x", "./../x"])
def test_relative_path_leaving_the_specs_folder(
    write_spec: WriteSpec, env: dict[str, str], raw: str
) -> None:
    spec = write_spec(f'[files]\nwrite = ["{raw}"]\n')
    assert _error(spec, env) == (
        str(spec), "files.write[0]",
        f"{raw!r} leaves the spec's folder; write it as an absolute path",
    )


def test_relative_path_leaving_by_a_sibling_with_the_same_prefix(
    tmp: Path, env: dict[str, str]
) -> None:
    """`../specs-evil` from `specs/` starts with the folder's name but is outside it."""
    folder = _folder(tmp / "specs")
    _folder(tmp / "specs-evil")
    spec = folder / "s.toml"
    spec.write_text('[files]\nread = ["../specs-evil"]\n')
    assert _error(spec, env) == (
        str(spec), "files.read[0]",
        "'../specs-evil' leaves the spec's folder; write it as an absolute path",
    )


@pytest.mark.parametrize("key", ["read", "write", "reopen"])
def test_missing_path_in_a_grant(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path, key: str
) -> None:
    missing = tmp / "not-here" / "x"
    spec = write_spec(f"[files]\n{key} = {toml_list(missing)}\n")
    assert _error(spec, env) == (str(spec), f"files.{key}[0]", f"'{missing}' does not exist")


def test_missing_relative_path_is_named_as_written(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    spec = write_spec('[files]\nread = ["not-here"]\n')
    assert _error(spec, env) == (str(spec), "files.read[0]", "'not-here' does not exist")


def test_path_through_a_file(write_spec: WriteSpec, env: dict[str, str], tmp: Path) -> None:
    plain = tmp / "plain"
    plain.write_text("x")
    spec = write_spec(f'[files]\nread = ["{plain}/x"]\n')
    assert _error(spec, env) == (
        str(spec), "files.read[0]", f"'{plain}/x': a part of it is not a folder"
    )


def test_symlink_loop(write_spec: WriteSpec, env: dict[str, str], tmp: Path) -> None:
    loop = tmp / "loop"
    loop.symlink_to(loop)
    spec = write_spec(f"[files]\nread = {toml_list(loop)}\n")
    assert _error(spec, env) == (
        str(spec), "files.read[0]", f"'{loop}': Too many levels of symbolic links"
    )


def test_empty_path_string(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[files]\nhide = [""]\n')
    assert _error(spec, env) == (str(spec), "files.hide[0]", "empty path")


def test_nul_byte_in_a_path(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[files]\nread = ["/usr", "/tmp\\u0000/etc"]\n')
    assert _error(spec, env) == (str(spec), "files.read[1]", "path contains a NUL byte")


# --- paths: what may not be granted --------------------------------------------------


@pytest.mark.parametrize("raw", ["/", "//", "/usr/..", "/./"])
def test_granting_the_whole_file_system(
    write_spec: WriteSpec, env: dict[str, str], raw: str
) -> None:
    spec = write_spec(f'[files]\nread = ["{raw}"]\n')
    assert _error(spec, env) == (str(spec), "files.read[0]", WHOLE_FS_REASON)


def test_granting_the_whole_file_system_through_a_symlink(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    link = tmp / "root-link"
    link.symlink_to("/")
    spec = write_spec(f"[files]\nwrite = {toml_list(link)}\n")
    assert _error(spec, env) == (str(spec), "files.write[0]", WHOLE_FS_REASON)


def test_granting_the_whole_file_system_through_tilde(
    write_spec: WriteSpec, lnk_home: Path
) -> None:
    spec = write_spec('[files]\nread = ["~"]\n')
    assert _error(spec, {"LNK_HOME": str(lnk_home), "HOME": "/"}) == (
        str(spec), "files.read[0]", WHOLE_FS_REASON
    )


@pytest.mark.parametrize("key", ["read", "write", "reopen"])
def test_granting_inside_the_settings_folder(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path, key: str
) -> None:
    inside = _folder(lnk_home / "sandbox")
    spec = write_spec(f"[files]\n{key} = {toml_list(inside)}\n")
    assert _error(spec, env) == (
        str(spec), f"files.{key}", f"{inside.resolve()} {SETTINGS_REASON}"
    )


def test_granting_the_settings_folder_itself(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path
) -> None:
    spec = write_spec(f'[files]\nread = ["/usr", "{lnk_home}/"]\n')
    assert _error(spec, env) == (
        str(spec), "files.read", f"{lnk_home.resolve()} {SETTINGS_REASON}"
    )


def test_granting_the_settings_folder_through_a_symlink(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path, tmp: Path
) -> None:
    link = tmp / "innocent"
    link.symlink_to(lnk_home)
    spec = write_spec(f"[files]\nwrite = {toml_list(link)}\n")
    assert _error(spec, env) == (
        str(spec), "files.write", f"{lnk_home.resolve()} {SETTINGS_REASON}"
    )


def test_granting_the_settings_folder_reached_through_a_symlinked_lnk_home(
    write_spec: WriteSpec, lnk_home: Path, tmp: Path
) -> None:
    """LNK_HOME names a link: the real folder is what is protected."""
    link = tmp / "lnk-link"
    link.symlink_to(lnk_home)
    spec = write_spec(f"[files]\nread = {toml_list(lnk_home)}\n")
    assert _error(spec, {"LNK_HOME": str(link), "HOME": str(tmp)}) == (
        str(spec), "files.read", f"{lnk_home.resolve()} {SETTINGS_REASON}"
    )


def test_agent_files_inside_the_settings_folder(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path
) -> None:
    _folder(lnk_home / "agents" / "bob")
    other = _folder(lnk_home / "sandbox")
    spec = write_spec(f'[agent]\nname = "bob"\nfiles = "{other}"\n')
    file, key, reason = _error(spec, env)
    assert file == str(spec)
    assert reason == f"{other.resolve()} {SETTINGS_REASON}"
    assert key == "agent.files"


def test_reopen_outside_any_hide(write_spec: WriteSpec, env: dict[str, str], tmp: Path) -> None:
    tree = _folder(tmp / "tree")
    inner = _folder(tree / "inner")
    spec = write_spec(f"[files]\nread = {toml_list(tree)}\nreopen = {toml_list(inner)}\n")
    assert _error(spec, env) == (str(spec), "files.reopen", f"{inner} lies in no hidden folder")


def test_reopen_of_the_hidden_folder_itself(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    tree = _folder(tmp / "tree")
    secret = _folder(tree / "secret")
    spec = write_spec(
        f"[files]\nread = {toml_list(tree)}\nhide = {toml_list(secret)}\n"
        f"reopen = {toml_list(secret)}\n"
    )
    assert _error(spec, env) == (str(spec), "files.reopen", f"{secret} lies in no hidden folder")


def test_reopen_with_no_grant_covering_it(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    secret = _folder(tmp / "tree" / "secret")
    inner = _folder(secret / "inner")
    spec = write_spec(f"[files]\nhide = {toml_list(secret)}\nreopen = {toml_list(inner)}\n")
    assert _error(spec, env) == (
        str(spec), "files.reopen",
        f"{inner}: no read or write grant covers it, so reopening gives nothing back",
    )


def test_reopen_covered_only_by_a_grant_of_a_sibling(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    tree = _folder(tmp / "tree")
    sibling = _folder(tmp / "tree-2")
    inner = _folder(tree / "secret" / "inner")
    spec = write_spec(
        f"[files]\nread = {toml_list(sibling)}\nhide = {toml_list(tree / 'secret')}\n"
        f"reopen = {toml_list(inner)}\n"
    )
    assert _error(spec, env) == (
        str(spec), "files.reopen",
        f"{inner}: no read or write grant covers it, so reopening gives nothing back",
    )


def test_hiding_the_whole_file_system(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[files]\nhide = ["/"]\n')
    assert _error(spec, env) == (str(spec), "files.hide[0]", WHOLE_FS_REASON)


def test_no_settings_folder_can_be_located(write_spec: WriteSpec) -> None:
    spec = write_spec("")
    assert _error(spec, {}) == (
        str(spec), "", "cannot locate Link's settings folder: set LNK_HOME or HOME"
    )


# --- the file itself -----------------------------------------------------------------


def test_missing_spec_file(tmp: Path, env: dict[str, str]) -> None:
    spec = tmp / "absent.toml"
    assert _error(spec, env) == (str(spec), "", "no such file")
    with pytest.raises(SpecError, match=r"^/.*/absent\.toml: no such file$"):
        load_spec(spec, env)


def test_missing_spec_file_named_relatively_is_reported_absolute(
    tmp: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp)
    assert _error(Path("absent.toml"), env) == (str(tmp / "absent.toml"), "", "no such file")


def test_spec_path_through_a_file(tmp: Path, env: dict[str, str]) -> None:
    plain = tmp / "plain"
    plain.write_text("")
    spec = plain / "spec.toml"
    assert _error(spec, env) == (str(spec), "", "cannot be read (Not a directory)")


def test_spec_that_is_a_folder(tmp: Path, env: dict[str, str]) -> None:
    folder = _folder(tmp / "spec.toml")
    assert _error(folder, env) == (str(folder), "", "is a folder, not a spec file")


def test_unreadable_spec(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('name = "unreadable"\n')
    spec.chmod(0)
    try:
        if os.geteuid() == 0:
            # root reads past the mode bits: the spec is loaded, not refused.
            assert load_spec(spec, env).name == "unreadable"
        else:
            assert _error(spec, env) == (str(spec), "", "cannot be read (permission denied)")
    finally:
        spec.chmod(0o644)


def test_spec_not_utf8(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("")
    spec.write_bytes(b'name = "caf\xe9"\n')
    assert _error(spec, env) == (str(spec), "", "not UTF-8 (byte 11)")


def test_spec_not_utf8_in_a_comment(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("")
    spec.write_bytes(b"# \xff\xfe\n")
    assert _error(spec, env) == (str(spec), "", "not UTF-8 (byte 2)")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[files\nread = []\n",
         "Expected ']' at the end of a table declaration (at line 1, column 7)"),
        ('name = "x', "Unterminated string (at end of document)"),
        ("name = ", "Invalid value (at end of document)"),
        ('name = "a"\nname = "b"\n', "Cannot overwrite a value (at line 2, column 11)"),
    ],
    ids=["unclosed-table", "unterminated-string", "no-value", "duplicate-key"],
)
def test_broken_toml(write_spec: WriteSpec, env: dict[str, str], text: str, reason: str) -> None:
    spec = write_spec(text)
    assert _error(spec, env) == (str(spec), "", f"not valid TOML: {reason}")


def test_spec_larger_than_the_limit(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("#" * MAX_SPEC_BYTES + "\n")
    assert _error(spec, env) == (
        str(spec), "", "larger than 262144 bytes; a spec is a short file"
    )


def test_spec_exactly_at_the_size_limit_loads(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    spec = write_spec("#" * (MAX_SPEC_BYTES - 1) + "\n")
    assert spec.stat().st_size == MAX_SPEC_BYTES
    assert load_spec(spec, env).read == ()


def test_more_paths_than_the_limit(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec(f"[files]\nhide = {toml_list(*['/nowhere'] * (MAX_PATHS_PER_KEY + 1))}\n")
    assert _error(spec, env) == (str(spec), "files.hide", "more than 256 paths")


def test_exactly_the_limit_of_paths_loads(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    spec = write_spec(f"[files]\nread = {toml_list(*[tmp] * MAX_PATHS_PER_KEY)}\n")
    assert load_spec(spec, env).read == (str(tmp),)


def test_first_error_is_reported_schema_before_paths(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    """A spec wrong twice names the schema error: nothing about it was resolved first."""
    spec = write_spec('[files]\nread = ["/no/such/path"]\n[verbs]\nopen = "yes"\n')
    file, key, _ = _error(spec, env)
    assert (file, key) == (str(spec), "verbs.open")


def test_parse_spec_refuses_like_load_spec(env: dict[str, str]) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(b"[files]\nred = []\n", file="/specs/s.toml", env=env)
    assert caught.value.file == "/specs/s.toml"
    assert caught.value.key == "files.red"
    assert str(caught.value).startswith("/specs/s.toml: files.red: unknown key")


# --- good specs ----------------------------------------------------------------------


def test_empty_spec_grants_nothing(write_spec: WriteSpec, env: dict[str, str],
                                   lnk_home: Path) -> None:
    spec = write_spec("")
    assert load_spec(spec, env) == Policy(settings=str(lnk_home.resolve()), spec=str(spec))


def test_tilde_expands_with_the_given_home_not_the_process_home(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    project = _folder(tmp / "home" / "project")
    spec = write_spec('[files]\nwrite = ["~/project"]\nhide = ["~/.ssh", "~"]\n')
    policy = load_spec(spec, env)
    assert policy.write == (str(project),)
    assert policy.hide == (str(tmp / "home" / ".ssh"), str(tmp / "home"))


def test_tilde_of_a_named_user_uses_their_home(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    user = pwd.getpwuid(os.geteuid())
    spec = write_spec(f'[files]\nhide = ["~{user.pw_name}/lnk-spec-test-nothing-here"]\n')
    expected = os.path.realpath(os.path.join(user.pw_dir, "lnk-spec-test-nothing-here"))
    assert load_spec(spec, env).hide == (expected,)


def test_relative_paths_resolve_against_the_specs_folder_not_the_cwd(
    tmp: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp / "project")
    data = _folder(folder / "data")
    _folder(folder / "sub")
    elsewhere = _folder(tmp / "elsewhere")
    _folder(elsewhere / "data")
    monkeypatch.chdir(elsewhere)
    spec = folder / "spec.toml"
    spec.write_text('[files]\nread = ["data", "sub/../data/.", "."]\nhide = ["secret"]\n')
    policy = load_spec(Path("../project/spec.toml"), env)
    assert policy.read == (str(data), str(folder))
    assert policy.hide == (str(folder / "secret"),)
    assert policy.spec == str(spec)


def test_symlinked_grant_resolves_to_its_target(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    target = _folder(tmp / "target")
    link = tmp / "link"
    link.symlink_to(target)
    chain = tmp / "chain"
    chain.symlink_to(link)
    spec = write_spec(
        f"[files]\nread = {toml_list(link)}\nwrite = {toml_list(chain / 'x' / '..')}\n"
        f"hide = {toml_list(link / 'gone')}\n"
    )
    _folder(target / "x")
    policy = load_spec(spec, env)
    assert policy.write == (str(target),)
    assert policy.read == ()
    assert policy.hide == (str(target / "gone"),)


def test_write_wins_over_read_for_the_same_path(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    a = _folder(tmp / "a")
    b = _folder(tmp / "b")
    spec = write_spec(f"[files]\nread = {toml_list(a, b)}\nwrite = {toml_list(a)}\n")
    policy = load_spec(spec, env)
    assert policy.read == (str(b),)
    assert policy.write == (str(a),)


def test_duplicates_removed_keeping_first_order(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    a = _folder(tmp / "a")
    b = _folder(tmp / "b")
    link = tmp / "to-a"
    link.symlink_to(a)
    spec = write_spec(
        f'[files]\nread = ["{b}", "{a}", "{a}/", "{a}/.", "{link}", "{b}//"]\n'
        f'hide = ["{a}/h", "{a}/h/", "{link}/h"]\n'
    )
    policy = load_spec(spec, env)
    assert policy.read == (str(b), str(a))
    assert policy.hide == (str(a / "h"),)


def test_hide_of_a_missing_path_is_allowed(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    missing = tmp / "not" / "made" / "yet"
    spec = write_spec(f"[files]\nhide = {toml_list(missing)}\n")
    assert load_spec(spec, env).hide == (str(missing),)


def test_reopen_inside_a_hide_under_a_grant(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    tree = _folder(tmp / "tree")
    secret = _folder(tree / "secret")
    allowed = _folder(secret / "allowed")
    spec = write_spec(
        f"[files]\nwrite = {toml_list(tree)}\nhide = {toml_list(secret)}\n"
        f"reopen = {toml_list(allowed, allowed)}\n"
    )
    policy = load_spec(spec, env)
    assert (policy.write, policy.hide, policy.reopen) == (
        (str(tree),), (str(secret),), (str(allowed),)
    )


def test_agent_hides_all_agents_and_writes_its_own_folder(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path, tmp: Path
) -> None:
    settings = lnk_home.resolve()
    own = _folder(settings / "agents" / "bob")
    work = _folder(tmp / "work")
    spec = write_spec(f'[agent]\nname = "bob"\n[files]\nread = {toml_list(work)}\n')
    assert load_spec(spec, env) == Policy(
        settings=str(settings), name="bob", spec=str(spec), read=(str(work),),
        write=(str(own),), hide=(str(settings / "agents"),), write_dot_files=(str(own),),
        agent="bob", home=str(own),
    )


def test_agent_with_its_own_home_and_files(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path, tmp: Path
) -> None:
    home = _folder(tmp / "agent-home")
    files = _folder(tmp / "agent-files")
    spec = write_spec(
        f'name = "wire-1"\n[agent]\nname = "bob"\nhome = "{home}"\nfiles = "{files}"\n'
    )
    policy = load_spec(spec, env)
    assert policy.name == "wire-1"
    assert policy.write == (str(home), str(files))
    assert policy.hide == (str(lnk_home.resolve() / "agents"),)
    # Its own folder's dot files are open; its files folder is the person's.
    assert policy.write_dot_files == (str(home),)


def test_write_dot_files_names_folders_of_write(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    app = _folder(tmp / "app")
    other = _folder(tmp / "other")
    spec = write_spec(f"[files]\nwrite = {toml_list(app, other)}\n"
                      f"write_dot_files = {toml_list(app, app)}\n")
    assert load_spec(spec, env).write_dot_files == (str(app),)


@pytest.mark.parametrize("where", ["read", "nested", "missing"])
def test_write_dot_files_outside_write_is_refused(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path, where: str
) -> None:
    app = _folder(tmp / "app")
    nested = _folder(app / "sub")
    named = {"read": app, "nested": nested, "missing": tmp / "gone"}[where]
    grants = f"read = {toml_list(app)}" if where == "read" else f"write = {toml_list(app)}"
    spec = write_spec(f"[files]\n{grants}\nwrite_dot_files = {toml_list(named)}\n")
    _file, key, reason = _error(spec, env)
    assert key.startswith("files.write_dot_files")
    assert ("not a folder of files.write" in reason) if where != "missing" else (
        "does not exist" in reason)


def test_write_dot_files_of_the_agents_files_folder_is_refused(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    home = _folder(tmp / "agent-home")
    files = _folder(tmp / "agent-files")
    spec = write_spec(f'[files]\nwrite_dot_files = {toml_list(files)}\n'
                      f'[agent]\nname = "bob"\nhome = "{home}"\nfiles = "{files}"\n')
    _file, key, reason = _error(spec, env)
    assert key == "files.write_dot_files"
    assert "agent's files folder, which is yours" in reason


@pytest.mark.parametrize("value", ["true", '"/tmp"', "[1]"])
def test_write_dot_files_wrong_type(
    write_spec: WriteSpec, env: dict[str, str], value: str
) -> None:
    spec = write_spec(f"[files]\nwrite_dot_files = {value}\n")
    _file, key, reason = _error(spec, env)
    assert key.startswith("files.write_dot_files")
    assert "must be" in reason


def test_settings_folder_is_the_canonical_lnk_home(
    write_spec: WriteSpec, lnk_home: Path, tmp: Path
) -> None:
    link = tmp / "lnk-link"
    link.symlink_to(lnk_home)
    spec = write_spec("")
    for given in (str(link), f"{link}/", f"{lnk_home}/./", f"{tmp}/x/../lnk-settings"):
        policy = load_spec(spec, {"LNK_HOME": given, "HOME": str(tmp)})
        assert policy.settings == str(lnk_home.resolve()), given


def test_settings_folder_falls_back_to_xdg_config_home(
    write_spec: WriteSpec, tmp: Path
) -> None:
    xdg = _folder(tmp / "xdg")
    spec = write_spec("")
    policy = load_spec(spec, {"XDG_CONFIG_HOME": f"{xdg}/", "HOME": str(tmp / "home")})
    assert policy.settings == str(xdg / "lnk")


def test_settings_folder_falls_back_to_home_when_xdg_is_relative(
    write_spec: WriteSpec, tmp: Path
) -> None:
    spec = write_spec("")
    policy = load_spec(spec, {"XDG_CONFIG_HOME": "rel/xdg", "HOME": str(tmp / "home")})
    assert policy.settings == str(tmp / "home" / ".config" / "lnk")


def test_xdg_settings_folder_is_protected_like_lnk_home(
    write_spec: WriteSpec, tmp: Path
) -> None:
    inside = _folder(tmp / "xdg" / "lnk" / "sandbox")
    spec = write_spec(f"[files]\nread = {toml_list(inside)}\n")
    assert _error(spec, {"XDG_CONFIG_HOME": str(tmp / "xdg")}) == (
        str(spec), "files.read", f"{inside} {SETTINGS_REASON}"
    )


def test_granting_a_parent_of_the_settings_folder_is_allowed(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    """The settings folder is hidden in every sandbox, so a tree around it may be granted."""
    spec = write_spec(f"[files]\nread = {toml_list(tmp)}\n")
    assert load_spec(spec, env).read == (str(tmp),)


def test_loaded_policy_survives_the_argv_round_trip(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    tree = _folder(tmp / "tree")
    allowed = _folder(tree / "secret" / "allowed")
    spec = write_spec(
        f'name = "w"\n[files]\nread = {toml_list(tree)}\nhide = {toml_list(tree / "secret")}\n'
        f"reopen = {toml_list(allowed)}\n"
    )
    policy = load_spec(spec, env)
    assert Policy.from_argv(policy.to_argv()) == policy


# --- a bad spec runs nothing -------------------------------------------------------------


def _assert_nothing_ran(run_sandbox: RunSandbox, spec: Path, tmp_path: Path, key: str) -> None:
    marker = tmp_path / "MARKER"
    result = run_sandbox(spec, "sh", "-c", f"touch '{marker}'")
    assert result.returncode == EXIT_SANDBOX_FAILED, result.stderr
    assert not marker.exists()
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"lnk-sandbox: {spec}: {key}: ")
    assert lines[0].endswith("; nothing was run")


def test_cli_unknown_key_runs_nothing(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path
) -> None:
    spec = write_spec(f"[files]\nwrite = {toml_list(tmp_path)}\nred = []\n")
    _assert_nothing_ran(run_sandbox, spec, tmp_path, "files.red")


def test_cli_read_home_not_a_boolean_runs_nothing(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path
) -> None:
    spec = write_spec(f'[files]\nwrite = {toml_list(tmp_path)}\nread_home = "yes"\n')
    _assert_nothing_ran(run_sandbox, spec, tmp_path, "files.read_home")


@pytest.fixture
def in_your_home() -> Iterator[Path]:
    """A folder of the test's own inside the running user's real home folder (the
    password database's: what read_home grants), removed after."""
    folder = tempfile.mkdtemp(prefix="lnk-read-home-", dir=pwd.getpwuid(os.getuid()).pw_dir)
    yield Path(folder).resolve()
    shutil.rmtree(folder)


# Each path read (or written) inside, and what it gave: `read PATH` or `closed PATH`.
_PROBE = ('for f in "$@"; do if cat "$f" >/dev/null 2>&1; then echo "read $f"; '
          'else echo "closed $f"; fi; done; for d in "$WORK" "$HOME" "$PERSON"; do '
          'if echo x > "$d/new" 2>/dev/null; then echo "wrote $d"; else echo "read only $d"; fi; '
          "done")


def test_F2_F6_read_home_reads_your_home_but_what_is_closed_in_it(
    run_sandbox: RunSandbox, write_spec: WriteSpec, in_your_home: Path
) -> None:
    """read_home = true on a real sandbox: a file of the home folder is read, not written;
    a hidden folder in it, Link's settings in it and another agent's folder stay closed; a
    reopen, a written folder and the agent's own folder in it are given again after it."""
    person = in_your_home
    settings = person / "lnk"
    for folder in (".ssh", "work", "lnk/secrets", "lnk/agents/main", "lnk/agents/other"):
        _folder(person / folder)
    for file in ("note", ".ssh/id_ed25519", ".ssh/known_hosts", "lnk/secrets/anthropic",
                 "lnk/agents/other/url-secret"):
        (person / file).write_text("x\n")
    spec = write_spec(f'[agent]\nname = "main"\n[files]\nread_home = true\n'
                      f'write = {toml_list(person / "work")}\nhide = {toml_list(person / ".ssh")}\n'
                      f'reopen = {toml_list(person / ".ssh/known_hosts")}\n')
    probes = [str(person / file) for file in ("note", ".ssh/id_ed25519", ".ssh/known_hosts",
                                              "lnk/secrets/anthropic",
                                              "lnk/agents/other/url-secret")]
    env = {**os.environ, "LNK_HOME": str(settings), "WORK": str(person / "work"),
           "PERSON": str(person)}
    result = run_sandbox(spec, "sh", "-c", _PROBE, "probe", *probes, env=env,
                         cwd=person / "work")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"read {person}/note", f"closed {person}/.ssh/id_ed25519",
        f"read {person}/.ssh/known_hosts", f"closed {settings}/secrets/anthropic",
        f"closed {settings}/agents/other/url-secret", f"wrote {person}/work",
        f"wrote {settings}/agents/main", f"read only {person}"]
    assert not (person / "new").exists()


def test_read_home_is_explained_under_reads(
    sandbox_env: dict[str, str], write_spec: WriteSpec
) -> None:
    """`explain` shows the home folder where it shows `read`: it is a read grant."""
    spec = write_spec("[files]\nread_home = true\n")
    done = subprocess.run([LNK_SANDBOX, "explain", "--spec", str(spec)], env=sandbox_env,
                          capture_output=True, text=True, timeout=60, check=False)
    home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    assert done.returncode == 0, done.stderr
    assert f"  reads (and runs programs from): {home}\n" in done.stdout


def test_cli_missing_grant_runs_nothing(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path
) -> None:
    spec = write_spec(f"[files]\nwrite = {toml_list(tmp_path, tmp_path / 'nope')}\n")
    _assert_nothing_ran(run_sandbox, spec, tmp_path, "files.write[1]")


def test_cli_grant_inside_settings_runs_nothing(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, lnk_home: Path
) -> None:
    spec = write_spec(f"[files]\nwrite = {toml_list(tmp_path, lnk_home)}\n")
    _assert_nothing_ran(run_sandbox, spec, tmp_path, "files.write")


def _toml_string(text: str) -> str:
    """A TOML basic string (escapes the few characters the names above use)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# Holes found by review, each closed and kept closed.


def test_explicit_agent_home_in_link_settings_is_refused(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path
) -> None:
    sandbox_files = _folder(lnk_home / "sandbox")
    spec = write_spec(f'[agent]\nname = "evil"\nhome = "{sandbox_files}"\n')
    _, key, reason = _error(spec, env)
    assert (key, reason) == ("agent.home", f"{sandbox_files.resolve()} {SETTINGS_REASON}")


def test_explicit_agent_home_of_another_agent_is_refused(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path
) -> None:
    other = _folder(lnk_home / "agents" / "other")
    spec = write_spec(f'[agent]\nname = "evil"\nhome = "{other}"\n')
    assert _error(spec, env)[1] == "agent.home"


def test_default_agent_home_that_is_a_link_is_refused(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path, tmp: Path
) -> None:
    _folder(lnk_home / "agents")
    (lnk_home / "agents" / "main").symlink_to(_folder(tmp / "elsewhere"))
    spec = write_spec('[agent]\nname = "main"\n')
    _, key, reason = _error(spec, env)
    assert key == "agent.name" and reason.endswith("is a link; refusing")


def test_empty_agent_table_needs_a_name(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec("[agent]\n")
    assert _error(spec, env)[1:] == ("agent.name", "an [agent] needs a name")


def test_deeply_nested_toml_is_a_spec_error_not_a_crash(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    spec = write_spec("a = " + "[" * 100_000)
    assert _error(spec, env)[2] == "not valid TOML: nested too deeply"


# --- [commands] ---------------------------------------------------------------------------


def test_commands_run_lists_files_and_folders_canonically(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    tools = _folder(tmp / "tools")
    tool = tools / "tool"
    tool.write_text("#!/bin/sh\n")
    link = tmp / "tool-link"
    link.symlink_to(tool)
    spec = write_spec(f"[commands]\nrun = {toml_list(tools, link, '/usr/bin/git')}\n")
    assert load_spec(spec, env).commands == (str(tools), str(tool), "/usr/bin/git")


@pytest.mark.parametrize("body", ["[commands]\n", "[commands]\nrun = []\n"])
def test_commands_empty_is_refused(write_spec: WriteSpec, env: dict[str, str], body: str) -> None:
    spec = write_spec(body)
    _file, key, reason = _error(spec, env)
    assert key == "commands.run"
    assert reason.startswith("an empty list lets nothing start")


def test_commands_in_a_written_folder_is_refused(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    work = _folder(tmp / "work")
    (work / "build.sh").write_text("#!/bin/sh\n")
    spec = write_spec(f"[files]\nwrite = {toml_list(work)}\n"
                      f"[commands]\nrun = {toml_list(work / 'build.sh')}\n")
    _file, key, reason = _error(spec, env)
    assert key == "commands.run"
    assert "which the sandbox writes: it could replace the program" in reason


def test_commands_missing_program_or_unknown_key(
    write_spec: WriteSpec, env: dict[str, str], tmp: Path
) -> None:
    spec = write_spec(f"[commands]\nrun = {toml_list(tmp / 'nope')}\n")
    assert _error(spec, env)[1] == "commands.run[0]"
    spec = write_spec("[commands]\nallow = []\n")
    assert _error(spec, env) == (str(spec), "commands.allow",
                                 "unknown key (known in [commands]: run)")


# --- [network] ---------------------------------------------------------------------------


def test_network_proxy_hosts_normalised(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('[network]\nmode = "proxy"\nhosts = ["API.Example.com.", '
                      '"*.example.org", "example.net:8443", "api.example.com"]\n')
    policy = load_spec(spec, env)
    assert policy.network == "proxy"
    assert policy.hosts == ("api.example.com", "*.example.org", "example.net:8443")


@pytest.mark.parametrize(
    ("body", "key", "reason"),
    [
        ('mode = "proxy"\nhosts = ["*"]', "network.hosts[0]", "\"*\" is every host"),
        ('mode = "proxy"\nhosts = ["*:443"]', "network.hosts[0]", "\"*\" is every host"),
        ('mode = "proxy"\nhosts = ["a b"]', "network.hosts[0]", "is not a host name"),
        ('mode = "proxy"\nhosts = ["user@a"]', "network.hosts[0]", "is not a host name"),
        ('mode = "proxy"\nhosts = ["a:0"]', "network.hosts[0]", "out of range"),
        ('mode = "proxy"\nhosts = ["a:70000"]', "network.hosts[0]", "out of range"),
        ('mode = "proxy"\nhosts = ["http://a"]', "network.hosts[0]", "is not a host name"),
        ('hosts = ["a"]', "network.hosts", "set mode = \"proxy\""),
        ('mode = "host"\nhosts = ["a"]', "network.hosts", "set mode = \"proxy\""),
        ('mode = "host"\ncalls_per_minute = 5', "network.calls_per_minute",
         "mode = \"host\" has neither"),
        ('mode = "open"', "network.mode", "\"none\" (no network), \"proxy\" (the filtering"),
        ('calls_per_minute = 5', "network.calls_per_minute", "set mode = \"proxy\""),
        ('mode = "proxy"\ncalls_per_minute = 0', "network.calls_per_minute", "between 1"),
        ('mode = "proxy"\ncalls_per_minute = true', "network.calls_per_minute", "whole number"),
        ('mode = "proxy"\nhosts = "a"', "network.hosts", "must be a list of strings"),
    ],
)
def test_network_refusals(write_spec: WriteSpec, env: dict[str, str], body: str, key: str,
                          reason: str) -> None:
    spec = write_spec(f"[network]\n{body}\n")
    _file, found_key, found_reason = _error(spec, env)
    assert found_key == key
    assert reason in found_reason


def test_wire_controls_in_the_spec(write_spec: WriteSpec, env: dict[str, str]) -> None:
    spec = write_spec('name = "w"\n[network]\nmode = "proxy"\ncalls_per_minute = 600\n'
                      '[pause]\nrefusals = 5\ntargets = 3\nwindow = "2m"\n')
    policy = load_spec(spec, env)
    assert (policy.calls_per_minute, policy.pause) == (600, (5, 3, 120))
    assert load_spec(write_spec(""), env).pause == (30, 20, 60)


@pytest.mark.parametrize(("body", "reason"), [
    ('[pause]\nwindow = "forever"', "seconds or minutes"),
    ('[pause]\nwindow = "0s"', "between 1s"),
    ('[pause]\nrefusals = -1', "between 1"),
    ('[pause]\nlimit = 1', "unknown key"),
])
def test_pause_refusals(write_spec: WriteSpec, env: dict[str, str], body: str,
                        reason: str) -> None:
    _file, _key, found = _error(write_spec(body + "\n"), env)
    assert reason in found



def test_verbs_secrets_tools_and_local_models_read_into_the_policy(
    write_spec: WriteSpec, env: dict[str, str]
) -> None:
    spec = write_spec('[verbs]\nsecrets = ["telegram", "bot-2"]\ntools = ["github"]\n'
                      "[localhost]\nports = [5432]\nmodels = [11434, 8080]\n")
    policy = load_spec(spec, env)
    assert (policy.secrets, policy.tools, policy.local_models, policy.localhost_ports) == (
        ("telegram", "bot-2"), ("github",), (11434, 8080), (5432,))
    assert policy.needs_proxy() and policy.has_wire()


@pytest.mark.parametrize(("text", "key", "reason"), [
    ("[verbs]\nsecrets = []", "verbs.secrets", "an empty list turns nothing on; name "
     "secrets (lnk-sandbox secret list), or drop the key"),
    ("[verbs]\ntools = []", "verbs.tools", "an empty list turns nothing on; name tools "
     "(lnk-sandbox tool list), or drop the key"),
    ('[verbs]\nsecrets = "telegram"', "verbs.secrets",
     "must be a list of secrets' names, not a string"),
    ('[verbs]\nsecrets = ["a.b"]', "verbs.secrets[0]", "a secret's name is 1 to 32 ASCII "
     "letters, digits, '-' or '_', starting with a letter or digit"),
    ('[verbs]\ntools = ["x", "x"]', "verbs.tools[1]", "'x' is named twice"),
    ("[localhost]\nports = [11434]\nmodels = [11434]", "localhost.models[0]",
     "port 11434 is in [localhost] ports too: a models port is relayed through the "
     "inference filter, a plain port is not; name it once"),
    ("[localhost]\nmodels = [3128]", "localhost.ports", None),
])
def test_verbs_secrets_tools_and_local_models_refusals(
    write_spec: WriteSpec, env: dict[str, str], text: str, key: str, reason: str | None
) -> None:
    spec = write_spec(text + "\n")
    found = _error(spec, env)
    assert found[:2] == (str(spec), key), found
    if reason is not None:
        assert found[2] == reason, found


# --- the policy's table: every field from its spec key, through the line and back -------


def test_every_field_of_the_table_round_trips_spec_policy_argv_policy(
    write_spec: WriteSpec, env: dict[str, str], lnk_home: Path, tmp: Path
) -> None:
    """Two specs that between them set every key a row of the table names (an [agent]'s
    HOME and [files] home exclude each other): each field read from its key is not its
    default, and the policy comes back whole from its line (the launcher's argv)."""
    from lnk_common.policy import FIELDS
    from lnk_wrap.spec import _SCHEMA, _TOP_LEVEL

    settings = lnk_home.resolve()
    _folder(settings / "agents" / "bob")
    work, app, hidden = _folder(tmp / "work"), _folder(tmp / "app"), _folder(tmp / "hidden")
    inner = _folder(hidden / "inner")
    program = tmp / "tool"
    program.write_text("")
    network = ('[network]\nmode = "proxy"\nhosts = ["example.com"]\ncalls_per_minute = 60\n'
               'server_tools = true\n[tcp]\nendpoints = ["db.example.com:5432"]\n'
               '[lan]\nhosts = ["192.168.1.20:8123"]\n[localhost]\nports = [5432]\n'
               'models = [11434]\n[verbs]\nmodel = ["openai"]\nsecrets = ["telegram"]\n'
               'tools = ["github"]\nopen = true\n[pause]\nrefusals = 3\ntargets = 2\n'
               'window = "10s"\n')
    with_agent = write_spec(f'name = "wire"\n[agent]\nname = "bob"\n'
                            f'[files]\nread = {toml_list(tmp)}\nwrite = {toml_list(work)}\n'
                            f'hide = {toml_list(hidden)}\nreopen = {toml_list(inner)}\n'
                            f'write_dot_files = {toml_list(work)}\n'
                            f'[commands]\nrun = {toml_list(program)}\n' + network)
    with_home = write_spec(f'[files]\nhome = "{app}"\n')
    policies = [load_spec(with_agent, env), load_spec(with_home, env)]
    known = {*_TOP_LEVEL, *_SCHEMA, *(f"{section}.{key}" for section, keys in _SCHEMA.items()
                                      if isinstance(keys, dict) for key in keys)}
    for field in FIELDS:
        if field.spec_key:
            assert field.spec_key in known, field.spec_key
            assert any(getattr(policy, field.name) != field.default for policy in policies), (
                field.name)
    for policy in policies:
        assert Policy.from_argv(policy.to_argv()) == policy


# --- addresses that are never a host: refused at load, as the proxy refuses them ---------


@pytest.mark.parametrize(("entry", "reason"), [
    ("[::ffff:169.254.169.254]", "169.254.169.254 is a cloud metadata service "
                                 "(as ::ffff:a9fe:a9fe)"),
    ("[64:ff9b::7f00:1]", "127.0.0.1 is this machine (loopback) (as 64:ff9b::7f00:1)"),
    ("240.0.0.1", "240.0.0.1 is in a range no host of a sandbox's is in"),
    ("0.0.0.1", "0.0.0.1 is in a range no host of a sandbox's is in"),
    ("169.254.169.254:80", "169.254.169.254 is a cloud metadata service"),
    ("127.0.0.1:22", "127.0.0.1 is this machine (loopback)"),
    ("[fe80::1]:22", "fe80::1 is link-local"),
    ("224.0.0.1", "224.0.0.1 is in a range no host of a sandbox's is in"),
])
def test_lan_refuses_at_load_what_the_proxy_refuses_at_the_call(
    write_spec: WriteSpec, env: dict[str, str], entry: str, reason: str
) -> None:
    """The spec's rule and the proxy's are one (lnk_common.addresses): what the proxy
    would refuse at the call is refused at load, with the file, the key and why."""
    import ipaddress

    from lnk_proxy.decide import MachineFacts, address_refusal

    spec = write_spec(f'[lan]\nhosts = ["{entry}"]\n')
    assert _error(spec, env) == (str(spec), "lan.hosts[0]",
                                 f"{reason}, not a machine of the local network")

    class _Nowhere(MachineFacts):
        def is_local(self, address: object) -> bool:
            return False

        def on_network(self, address: object) -> bool:
            return False

    from lnk_common.endpoints import split_host_port

    address = ipaddress.ip_address(split_host_port(entry)[0])
    assert address_refusal(address, _Nowhere(), lan=True) == reason


@pytest.mark.parametrize("entry", ["10.0.0.9:80", "[fd00:211::9]:22", "192.168.1.20"])
def test_lan_keeps_a_machine_of_the_local_network(
    write_spec: WriteSpec, env: dict[str, str], entry: str
) -> None:
    spec = write_spec(f'[lan]\nhosts = ["{entry}"]\n')
    assert load_spec(spec, env).lan == (entry,)


_NEEDS_A_WIRE_CASES = [
    ("models", '[verbs]\nmodel = "anthropic"\n'),
    ("secrets", '[verbs]\nsecrets = ["telegram"]\n'),
    ("tools", '[verbs]\ntools = ["github"]\n'),
    ("open_pages", "[verbs]\nopen = true\n"),
    ("endpoints", '[tcp]\nendpoints = ["db.example.com:5432"]\n'),
    ("lan", '[lan]\nhosts = ["10.0.0.9"]\n'),
    ("localhost_ports", "[localhost]\nports = [5432]\n"),
    ("local_models", "[localhost]\nmodels = [11434]\n"),
    ("calls_per_minute", ""),
]


@pytest.mark.parametrize(("name", "toml"), _NEEDS_A_WIRE_CASES)
def test_host_mode_refuses_every_field_that_needs_a_wire_at_its_key(
    write_spec: WriteSpec, env: dict[str, str], name: str, toml: str
) -> None:
    """The fields the Policy refuses with network "host" (NEEDS_A_WIRE), each refused by
    the loader at its own spec key."""
    from lnk_common.policy import FIELDS, NEEDS_A_WIRE

    assert name in NEEDS_A_WIRE
    key = next(field.spec_key for field in FIELDS if field.name == name)
    network = '[network]\nmode = "host"\n' + ("calls_per_minute = 5\n" if not toml else "")
    spec = write_spec(network + toml)
    _file, refused, reason = _error(spec, env)
    assert (refused, reason.split(",")[0]) == (key, "needs the sandbox's own network and its wire")


def test_host_mode_list_is_every_field_that_needs_a_wire() -> None:
    """The parametrisation above names each of NEEDS_A_WIRE once."""
    from lnk_common.policy import NEEDS_A_WIRE

    assert sorted(name for name, _toml in _NEEDS_A_WIRE_CASES) == sorted(NEEDS_A_WIRE)
