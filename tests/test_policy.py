"""The Policy's argv form: it round-trips exactly, and anything that is not a policy is
one PolicyArgvError, never another exception and never a policy that opens more."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common import policy as policy_module
from lnk_common.policy import (
    FIELDS,
    HELPERS,
    MODEL_PROVIDERS,
    Policy,
    PolicyArgvError,
    helper_argv,
    option_of,
    parse_helper_argv,
    split_argv,
)

SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

_segments = st.text(SAFE, min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
paths = st.lists(_segments, max_size=5).map(lambda parts: "/" + "/".join(parts))
path_tuples = st.lists(paths, max_size=6).map(tuple)
any_names = st.text().filter(lambda s: not s.startswith("-"))
safe_names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}", fullmatch=True)


@st.composite
def policies(draw: st.DrawFn, names: st.SearchStrategy[str] = any_names) -> Policy:
    write = draw(path_tuples)
    network = draw(st.sampled_from(["none", "proxy"]))
    models = tuple(draw(st.lists(st.sampled_from(MODEL_PROVIDERS), unique=True, max_size=4)))
    return Policy(
        settings=draw(paths),
        settings_via=draw(st.one_of(st.just(""), paths)),
        read=draw(path_tuples),
        write=write,
        hide=draw(path_tuples),
        reopen=draw(path_tuples),
        write_dot_files=tuple(draw(st.lists(st.sampled_from(write), max_size=3)))
        if write else (),
        commands=draw(path_tuples),
        learn=draw(st.one_of(st.just(""), paths)),
        network=network,
        hosts=tuple(draw(st.lists(st.from_regex(r"(\*\.)?[a-z0-9][a-z0-9.-]{0,20}(:[0-9]{1,5})?",
                                                fullmatch=True), max_size=4)))
        if network == "proxy" else (),
        name=draw(st.one_of(st.just(""), names)),
        spec=draw(st.one_of(st.just(""), paths)),
        keep_session=draw(st.booleans()),
        models=models,
        server_tools=bool(models) and draw(st.booleans()),
        agent=draw(st.one_of(st.just(""), safe_names)),
    )


@given(policies())
def test_argv_round_trip_is_exact(policy: Policy) -> None:
    argv = policy.to_argv()
    assert all(isinstance(word, str) for word in argv)
    back = Policy.from_argv(argv)
    assert back == policy
    assert hash(back) == hash(policy)
    assert back.to_argv() == argv


@given(policies(names=safe_names), st.lists(st.text(), min_size=1, max_size=4))
def test_argv_with_command_splits_back_at_the_first_separator(
    policy: Policy, command: list[str]
) -> None:
    """What wrap emits (OPTIONS -- COMMAND) splits back into the same options and command,
    even when the command itself holds `--`."""
    options = policy.to_argv()
    assert split_argv([*options, "--", *command]) == (options, command)


_words = st.one_of(
    st.sampled_from([
        "--settings", "--settings-via", "--read", "--write", "--hide", "--reopen", "--name",
        "--spec", "--keep-session", "--", "/", "/a", "/a/b", "//a", "/a/../b", "/a/./b", "/a/", "a",
        "", "/a\0b", "--read=/a", "-r", "--model", "openai", "gemini", "--server-tools",
        "--agent", "main",
    ]),
    st.text(),
)


@given(st.lists(_words, max_size=12))
def test_from_argv_on_any_words_is_a_policy_or_a_policy_argv_error(argv: list[str]) -> None:
    try:
        policy = Policy.from_argv(argv)
    except PolicyArgvError as error:
        assert str(error)
        return
    # Whatever it accepted is a policy whose every path is absolute and normalised, and
    # which says the same thing when written out again.
    for path in (policy.settings, *policy.read, *policy.write, *policy.hide, *policy.reopen):
        assert path.startswith("/") and not path.startswith("//") and "\0" not in path
        assert "/./" not in path + "/" and "/../" not in path + "/" and "//" not in path
        assert path == "/" or not path.endswith("/")
    assert Policy.from_argv(policy.to_argv()) == policy


@given(st.lists(_words, max_size=12))
def test_split_argv_on_any_words_splits_or_raises_policy_argv_error(argv: list[str]) -> None:
    try:
        options, command = split_argv(argv)
    except PolicyArgvError:
        assert "--" not in argv or argv.index("--") == len(argv) - 1
        return
    assert "--" not in options
    assert command
    assert [*options, "--", *command] == argv


# --- exact errors ----------------------------------------------------------------------


def _argv_error(argv: list[str]) -> str:
    with pytest.raises(PolicyArgvError) as caught:
        Policy.from_argv(argv)
    return str(caught.value)


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("--bogus", "unknown option '--bogus'"),
        ("--read=/a", "unknown option '--read=/a'"),
        ("-r", "unknown option '-r'"),
        ("/a", "unknown option '/a'"),
        ("--", "unknown option '--'"),
        ("", "unknown option ''"),
    ],
)
def test_unknown_option(word: str, message: str) -> None:
    assert _argv_error(["--settings", "/s", word, "/a"]) == message


@pytest.mark.parametrize(
    "option", ["--settings", "--read", "--write", "--hide", "--reopen", "--name", "--spec"]
)
def test_missing_value(option: str) -> None:
    argv = ["--settings", "/s", option] if option != "--settings" else ["--settings"]
    assert _argv_error(argv) == f"{option} needs a value"


@pytest.mark.parametrize("option", ["--settings", "--name", "--spec"])
def test_value_option_given_twice(option: str) -> None:
    argv = ["--settings", "/s", option, "/v", option, "/v"]
    if option == "--settings":
        argv = ["--settings", "/s", "--settings", "/s"]
    assert _argv_error(argv) == f"{option} given twice"


def test_duplicated_settings_with_different_values() -> None:
    """A second --settings could move the hidden settings folder: refused, not last-wins."""
    assert _argv_error(["--settings", "/s", "--read", "/a", "--settings", "/t"]) == (
        "--settings given twice"
    )


def test_keep_session_given_twice() -> None:
    assert _argv_error(["--settings", "/s", "--keep-session", "--keep-session"]) == (
        "--keep-session given twice"
    )


@pytest.mark.parametrize("argv", [[], ["--read", "/a"], ["--keep-session", "--name", "n"]])
def test_missing_settings(argv: list[str]) -> None:
    assert _argv_error(argv) == (
        "--settings is required: Link's settings folder is hidden in every sandbox"
    )


@pytest.mark.parametrize("option", ["--settings", "--read", "--write", "--hide", "--reopen"])
@pytest.mark.parametrize("path", ["a", "a/b", "./a", "../a", "", "~/a"])
def test_relative_path(option: str, path: str) -> None:
    argv = [option, path] if option == "--settings" else ["--settings", "/s", option, path]
    assert _argv_error(argv) == f"not an absolute path: {path!r}"


@pytest.mark.parametrize("option", ["--settings", "--read", "--write", "--hide", "--reopen"])
@pytest.mark.parametrize(
    "path", ["/a/../b", "/a/./b", "/a/", "/a//b", "/..", "/.", "/a/.", "/a/.."]
)
def test_non_normalised_path(option: str, path: str) -> None:
    argv = [option, path] if option == "--settings" else ["--settings", "/s", option, path]
    assert _argv_error(argv) == f"not a normalised path: {path!r}"


@pytest.mark.parametrize("path", ["//a", "//", "///a"])
def test_double_slash_root(path: str) -> None:
    assert _argv_error(["--settings", "/s", "--read", path]) == f"not an absolute path: {path!r}"


@pytest.mark.parametrize("path", ["/a\0b", "/\0", "/a/\0"])
def test_nul_in_a_path(path: str) -> None:
    assert _argv_error(["--settings", "/s", "--hide", path]) == (
        f"not an absolute path: {path!r}"
    )


def test_constructor_checks_paths_like_from_argv() -> None:
    with pytest.raises(PolicyArgvError, match=r"^not a normalised path: '/a/\.\./b'$"):
        Policy(settings="/s", reopen=("/a/../b",))
    with pytest.raises(PolicyArgvError, match=r"^not an absolute path: 'rel'$"):
        Policy(settings="rel")


# --- what from_argv accepts ------------------------------------------------------------


def test_from_argv_reads_every_option() -> None:
    policy = Policy.from_argv([
        "--read", "/r1", "--keep-session", "--write", "/w", "--settings", "/s", "--read", "/r2",
        "--hide", "/h", "--reopen", "/h/o", "--name", "wire", "--spec", "/specs/s.toml",
    ])
    assert policy == Policy(
        settings="/s", read=("/r1", "/r2"), write=("/w",), hide=("/h",), reopen=("/h/o",),
        name="wire", spec="/specs/s.toml", keep_session=True,
    )


def test_from_argv_keeps_repeated_paths_in_order() -> None:
    policy = Policy.from_argv(["--settings", "/s", "--read", "/b", "--read", "/a",
                               "--read", "/b"])
    assert policy.read == ("/b", "/a", "/b")


def test_a_name_that_looks_like_an_option_is_refused() -> None:
    # It could not split back from the command after `--` on the launcher's line.
    with pytest.raises(PolicyArgvError, match="may not start with '-'"):
        Policy.from_argv(["--settings", "/s", "--name", "--read"])
    with pytest.raises(PolicyArgvError, match="may not start with '-'"):
        Policy.from_argv(["--settings", "/s", "--spec", "--"])


def test_root_path_is_a_valid_path() -> None:
    assert Policy.from_argv(["--settings", "/", "--hide", "/"]).hide == ("/",)


def test_with_name_changes_only_the_name() -> None:
    policy = Policy(settings="/s", read=("/r",), write=("/w",), hide=("/h",),
                    reopen=("/h/o",), name="a", spec="/x.toml", keep_session=True)
    renamed = policy.with_name("b")
    assert renamed.name == "b"
    assert renamed == Policy.from_argv(
        [*policy.to_argv()[:2], "--name", "b", *policy.to_argv()[4:]]
    )


def test_policy_is_not_equal_to_other_things() -> None:
    assert Policy(settings="/s") != ("/s", (), (), (), (), "", "", False)
    assert Policy(settings="/s") != Policy(settings="/s", keep_session=True)


# --- split_argv --------------------------------------------------------------------------


def test_split_argv_without_separator() -> None:
    with pytest.raises(PolicyArgvError) as caught:
        split_argv(["--settings", "/s", "sh"])
    assert str(caught.value) == "expected OPTIONS -- COMMAND [ARG…]"


def test_split_argv_of_nothing() -> None:
    with pytest.raises(PolicyArgvError) as caught:
        split_argv([])
    assert str(caught.value) == "expected OPTIONS -- COMMAND [ARG…]"


@pytest.mark.parametrize("argv", [["--"], ["--settings", "/s", "--"]])
def test_split_argv_with_nothing_after_separator(argv: list[str]) -> None:
    with pytest.raises(PolicyArgvError) as caught:
        split_argv(argv)
    assert str(caught.value) == "no command after --"


def test_split_argv_cuts_at_the_first_separator() -> None:
    assert split_argv(["--settings", "/s", "--", "sh", "--", "-c"]) == (
        ["--settings", "/s"], ["sh", "--", "-c"]
    )


def test_split_argv_with_no_options() -> None:
    assert split_argv(["--", "true"]) == ([], ["true"])


def test_split_argv_command_may_be_an_empty_word() -> None:
    assert split_argv(["--", ""]) == ([], [""])


def test_write_dot_files_must_name_a_written_folder() -> None:
    with pytest.raises(PolicyArgvError) as caught:
        Policy.from_argv(["--settings", "/s", "--write", "/a", "--write-dot-file", "/b"])
    assert str(caught.value) == "--write-dot-file /b is not a written folder (--write)"
    policy = Policy.from_argv(["--settings", "/s", "--write", "/a", "--write-dot-file", "/a"])
    assert policy.write_dot_files == ("/a",)


def test_settings_via_must_be_absolute_and_normalised() -> None:
    """The path the verbs name Link's settings by (F6: the launcher follows it again)."""
    assert Policy.from_argv(["--settings", "/s", "--settings-via", "/l/lnk"]).settings_via == (
        "/l/lnk")
    for named in ("l/lnk", "/l/../lnk"):
        with pytest.raises(PolicyArgvError):
            Policy.from_argv(["--settings", "/s", "--settings-via", named])


# --- every field survives every copy (a field added cannot be dropped) -----------------

# A value other than the default for every field of a Policy. A field added to Policy
# without a line here fails test_every_field_has_a_value_here: then add one.
NOT_DEFAULT: dict[str, object] = {
    "settings": "/s",
    "settings_via": "/l/lnk",
    "read": ("/r",),
    "write": ("/w",),
    "hide": ("/h",),
    "reopen": ("/h/o",),
    "write_dot_files": ("/w",),
    "commands": ("/usr/bin/git",),
    "learn": "/s/learn/1",
    "network": "proxy",
    "hosts": ("example.com",),
    "endpoints": ("db.example.com:5432",),
    "lan": ("192.168.1.20:8123",),
    "localhost_ports": (5432,),
    "site_packages": "/venv/site-packages",
    "calls_per_minute": 60,
    "pause": (3, 2, 10),
    "name": "wire",
    "spec": "/specs/s.toml",
    "keep_session": True,
    "models": ("openai", "anthropic"),
    "server_tools": True,
    "agent": "main",
    "secrets": ("telegram", "github-bot"),
    "local_models": (11434, 8080),
    "tools": ("github", "far"),
    "open_pages": True,
    "home": "/w",
}


def test_every_field_has_a_value_here_and_the_slots_are_the_table() -> None:
    assert tuple(Policy.__slots__) == tuple(field.name for field in FIELDS)
    assert set(Policy.__slots__) == set(NOT_DEFAULT)


def test_every_field_survives_with_name_replace_and_the_argv_form() -> None:
    policy = Policy(**NOT_DEFAULT)
    default = Policy(settings="/s")
    for field in Policy.__slots__:
        if field != "settings":
            assert getattr(policy, field) != getattr(default, field), field
    renamed = policy.with_name("other")
    back = Policy.from_argv(policy.to_argv())
    with_packages = policy.with_site_packages("/elsewhere")
    for field in Policy.__slots__:
        assert getattr(back, field) == NOT_DEFAULT[field], field
        assert getattr(renamed, field) == ("other" if field == "name" else NOT_DEFAULT[field])
        assert getattr(with_packages, field) == (
            "/elsewhere" if field == "site_packages" else NOT_DEFAULT[field])
    assert back == policy
    assert Policy.from_argv(renamed.to_argv()) == renamed


def test_replace_checks_like_a_new_policy_and_knows_its_fields() -> None:
    policy = Policy(settings="/s", models=("gemini",))
    assert policy.replace(server_tools=True).server_tools is True
    with pytest.raises(TypeError, match=r"^Policy has no field colour$"):
        policy.replace(colour="red")
    with pytest.raises(PolicyArgvError, match=r"^--model 'bing': one of "):
        policy.replace(models=("bing",))


# --- the model verb -------------------------------------------------------------------------


def test_model_providers_are_the_ones_the_proxy_rules_know() -> None:
    from lnk_proxy.model_rules import PROVIDER_HOSTS

    assert set(MODEL_PROVIDERS) == set(PROVIDER_HOSTS)


def test_models_in_the_argv_form_repeat_and_keep_their_order() -> None:
    policy = Policy.from_argv(["--settings", "/s", "--model", "openrouter", "--model", "openai",
                               "--server-tools", "--agent", "main"])
    assert (policy.models, policy.server_tools, policy.agent) == (
        ("openrouter", "openai"), True, "main")
    assert policy.to_argv() == ["--settings", "/s", "--agent", "main", "--model", "openrouter",
                                "--model", "openai", "--pause", "30,20,60", "--server-tools"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "bing"], "--model 'bing': one of anthropic, openai, gemini, openrouter"),
        (["--model", "OpenAI"], "--model 'OpenAI': one of anthropic, openai, gemini, openrouter"),
        (["--model", ""], "--model '': one of anthropic, openai, gemini, openrouter"),
        (["--model", "openai", "--model", "openai"], "--model names a provider twice"),
        (["--server-tools"],
         "--server-tools needs --model: it keeps a hosted model's server-side tools"),
        (["--model", "openai", "--server-tools", "--server-tools"], "--server-tools given twice"),
        (["--model"], "--model needs a value"),
        (["--agent", "a", "--agent", "b"], "--agent given twice"),
        (["--agent", "../x"], "--agent '../x': use letters, digits, '.', '_' and '-'"),
        (["--agent", "a/b"], "--agent 'a/b': use letters, digits, '.', '_' and '-'"),
        (["--agent", ".."], "--agent '..': use letters, digits, '.', '_' and '-'"),
        (["--agent", "-x"], "a name or spec may not start with '-': '-x'"),
    ],
)
def test_model_options_are_strict(argv: list[str], message: str) -> None:
    assert _argv_error(["--settings", "/s", *argv]) == message


def test_a_model_verb_needs_the_proxy_even_with_network_none() -> None:
    policy = Policy(settings="/s", models=("anthropic",))
    assert policy.network == "none"
    assert policy.needs_proxy() and policy.has_wire()
    assert not Policy(settings="/s").needs_proxy()
    assert not Policy(settings="/s").has_wire()


# --- secrets and local models ---------------------------------------------------------------


def test_secret_names_are_the_stores() -> None:
    from lnk_common import secrets

    assert policy_module.SECRET_NAME_CHARACTERS == secrets.MAX_NAME_LENGTH
    for name in ("telegram", "a", "A-b_9", "x" * 32):
        assert Policy(settings="/s", secrets=(name,)).secrets == (name,)
        assert secrets.name_problem(name) is None
    for name in ("", "-a", "_a", "a.b", "a/b", "x" * 33, "tél", "a b"):
        assert secrets.name_problem(name) is not None
        with pytest.raises(PolicyArgvError, match="a secret's name is"):
            Policy(settings="/s", secrets=(name,))


@pytest.mark.parametrize(("argv", "message"), [
    (["--secret", "t", "--secret", "t"], "--secret names a secret twice"),
    (["--local-model", "11434", "--local-model", "11434"], "--local-model names a port twice"),
    (["--local-model", "5432", "--localhost-port", "5432"], "or one of --localhost-port"),
    (["--local-model", "0"], "--local-model '0': a port, 1 to 65535"),
    (["--local-model", "\u0661\u0661"], "a port, 1 to 65535"),
])
def test_secret_and_local_model_options_are_strict(argv: list[str], message: str) -> None:
    with pytest.raises(PolicyArgvError, match=re.escape(message)):
        Policy.from_argv(["--settings", "/s", *argv])


def test_secrets_and_local_models_need_the_proxy_and_a_wire() -> None:
    for policy in (Policy(settings="/s", secrets=("t",)),
                   Policy(settings="/s", local_models=(11434,))):
        assert policy.needs_proxy() and policy.has_wire()


# --- the table: one row a field, one spelling, each helper's options from it ------------

# The type each kind of value is for mypy (the Policy's annotations).
_KIND_TYPES = {"path": "str", "word": "str", "paths": "tuple[str, ...]",
               "words": "tuple[str, ...]", "ports": "tuple[int, ...]", "count": "int",
               "flag": "bool", "pause": "tuple[int, int, int]"}


def test_the_annotations_are_the_tables_kinds() -> None:
    """The one other place a field is written (for mypy), held equal to its row."""
    assert Policy.__annotations__ == {field.name: _KIND_TYPES[field.kind] for field in FIELDS}


def test_one_spelling_the_option_is_the_fields_name() -> None:
    """The rule (lnk_common.policy.option_of): `-` for `_`, and a field of several
    values, given once per value, without its final `s`."""
    several = {"paths", "words", "ports"}
    for field in FIELDS:
        word = field.name.removesuffix("s") if field.kind in several else field.name
        assert field.option == option_of(field.name, field.kind) == "--" + word.replace("_", "-")
    assert len({field.option for field in FIELDS}) == len(FIELDS)
    assert {field.name: field.option for field in FIELDS}["open_pages"] == "--open-pages"
    assert {field.name: field.option for field in FIELDS}["commands"] == "--command"


def test_every_helper_named_by_a_row_is_a_helper() -> None:
    assert {helper for field in FIELDS for helper in field.helpers} == set(HELPERS)


def _helper_parsers() -> dict[str, tuple[object, tuple[str, ...]]]:
    """Each helper's own parser, as its program calls it, and its options that are not
    the policy's: what a test gives it so that the parser is satisfied."""
    from lnk_dns.helper import _options as dns_options
    from lnk_execwatch.main import _parse as watch_options
    from lnk_proxy.main import parse_options as proxy_options
    from lnk_relay.main import parse_options as relay_options

    served = ("--wire", "w", "--listen", "127.0.0.1:1")
    return {"proxy": (proxy_options, served), "relay": (relay_options, served),
            "watch": (watch_options, ("--socket-fd", "3")),
            "dns": (dns_options, ("--pid", "1", "--net-namespace", "2", "--proxy-fd", "3"))}


def _parsed(helper: str, argv: list[str]) -> dict[str, list[str]] | str:
    """What the helper's parser makes of `argv`, or the one line it refuses it with."""
    parser, own = _helper_parsers()[helper]
    assert callable(parser)
    try:
        return parser([*own, *argv])  # type: ignore[no-any-return]
    except ValueError as error:
        return str(error)
    except SystemExit:
        return "exit 2"


@pytest.mark.parametrize("helper", HELPERS)
def test_every_helper_takes_exactly_its_fields_options(helper: str) -> None:
    """Each helper's parser accepts the options the table gives it, read back to the
    same words, and refuses every other field's option."""
    policy = Policy(**{**NOT_DEFAULT, "network": "proxy"})
    given = helper_argv(policy, helper)
    mine = [field for field in FIELDS if helper in field.helpers]
    assert {word for word in given if word.startswith("--")} == {
        field.option for field in mine}
    parsed = _parsed(helper, given)
    assert isinstance(parsed, dict), parsed
    for field in mine:
        words = [given[index + 1] for index, word in enumerate(given)
                 if word == field.option and field.kind != "flag"]
        assert parsed[field.option] == (words or ["yes"]), field.name
    for field in FIELDS:
        if helper not in field.helpers:
            value = "yes" if field.kind == "flag" else "/x"
            other = [field.option] if field.kind == "flag" else [field.option, value]
            assert isinstance(_parsed(helper, [*given, *other]), str), field.name


@pytest.mark.parametrize("helper", HELPERS)
def test_a_helpers_fields_are_checked_by_their_rows(helper: str) -> None:
    """A value the table refuses is refused by the helper too, in the table's words."""
    bad = {"ports": "0", "count": "x", "pause": "1,2", "words": "-x", "path": "rel",
           "paths": "rel", "word": "-x"}
    for field in FIELDS:
        if helper in field.helpers and field.kind in bad:
            with pytest.raises(PolicyArgvError):
                parse_helper_argv(helper, [field.option, bad[field.kind]])
            assert isinstance(_parsed(helper, [field.option, bad[field.kind]]), str)
        if helper in field.helpers and field.kind in ("flag", "word", "path", "count"):
            twice = [field.option] * 2 if field.kind == "flag" else [
                field.option, "1", field.option, "1"]
            with pytest.raises(PolicyArgvError, match="given twice"):
                parse_helper_argv(helper, twice)


def test_network_host_refuses_every_field_that_needs_a_wire() -> None:
    from lnk_common.policy import NEEDS_A_WIRE

    for name in NEEDS_A_WIRE:
        with pytest.raises(PolicyArgvError, match=r"^--network host has no wire"):
            Policy(settings="/s", network="host", **{name: NOT_DEFAULT[name]})
