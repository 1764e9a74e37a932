"""The model verb's side of a sandbox's start: its placeholder, and the environment the
program gets when `[verbs] model` names providers.

Job: the program talks to a hosted model through `/_link/model/<provider>` on the
proxy and never holds the key. So each named provider's SDK is pointed at the verb
(its base-URL variable) and given a placeholder where its key goes; every variable
that could carry a key of any provider, or send a named provider's SDK another way
(a profile, a federation token, Vertex, Azure, custom headers), is taken out. The
proxy adds the real key (the secret of the provider's name) and accepts a call only
if it carries the placeholder.

Trust: the caller's environment is the harness's, not ours: whatever it holds for a
provider is replaced or removed, and a value that looked like a real key is said in
one line (never printed). The placeholder is no secret from the program (it holds
it), but it is kept out of every argv: the proxy gets it in its environment
(LNK_PLACEHOLDER), the program in its own; bubblewrap's argv, readable by any user in
/proc, never has it.

The placeholder is `lnk-` and 40 lowercase hex characters: one per run, or one per
agent for an [agent] spec, kept in Link's settings (`sandbox/agents/<name>/
model-placeholder`, a folder no sandbox sees: the agent's own folder `agents/<name>`
is written by its sandbox, so not there), so a harness that wrote it into its own
configuration still works after a restart.

Sans IO but for `placeholder_for` (the agent's file). Light: imported at a sandbox's
start when a model verb is on.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from lnk_common.policy import Policy

__all__ = [
    "FOREIGN_KEY_NOTE",
    "KEY_VARIABLES",
    "PLACEHOLDER_PREFIX",
    "PROVIDER_VARIABLES",
    "ROUTE_VARIABLES",
    "ModelEnvError",
    "is_placeholder",
    "new_placeholder",
    "placeholder_for",
    "sandbox_environment",
    "verb_base",
]

PLACEHOLDER_PREFIX = "lnk-"
# 20 random bytes, as secrets.token_hex(20) gives (os.urandom: the `secrets` module's
# imports cost a start more than the one call it would make).
PLACEHOLDER_BYTES = 20
PLACEHOLDER_LENGTH = len(PLACEHOLDER_PREFIX) + 2 * PLACEHOLDER_BYTES
_HEX = frozenset("0123456789abcdef")

# provider: (its base-URL variable, the provider's root under the verb, its key
# variable). The SDKs append their own paths to the base: Anthropic's /v1/messages,
# google-genai's /v1beta/…; OpenAI's and OpenRouter's base holds the version.
PROVIDER_VARIABLES: dict[str, tuple[str, str, str]] = {
    "anthropic": ("ANTHROPIC_BASE_URL", "", "ANTHROPIC_API_KEY"),
    "openai": ("OPENAI_BASE_URL", "/v1", "OPENAI_API_KEY"),
    "gemini": ("GOOGLE_GEMINI_BASE_URL", "", "GEMINI_API_KEY"),
    "openrouter": ("OPENROUTER_BASE_URL", "/api/v1", "OPENROUTER_API_KEY"),
}

# Variables that carry a key, a token or a secret of a provider, read by its SDK or its
# harnesses (anthropic 2.14, openai 3.57, google-genai 3.6.1, read in their sources;
# docs/decisions/0019-model-verb-start.md lists where). With any model verb on, every one
# of them goes, the
# named providers' and the others' alike: the sandbox holds no provider's key at all.
KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "anthropic": (
        "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_IDENTITY_TOKEN",
        # "Name: Value" lines the SDK and Claude Code add to every call: a key can ride
        # in them (an Authorization or X-Api-Key line).
        "ANTHROPIC_CUSTOM_HEADERS",
        # The same models through Bedrock, Foundry and AWS: keys of their own.
        "ANTHROPIC_AWS_API_KEY", "AWS_BEARER_TOKEN_BEDROCK", "ANTHROPIC_FOUNDRY_API_KEY",
        # Secrets of the SDK's other surfaces (webhooks, environments' workers).
        "ANTHROPIC_WEBHOOK_SIGNING_KEY", "ANTHROPIC_ENVIRONMENT_KEY", "ANTHROPIC_WORK_SECRET",
    ),
    "openai": (
        "OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "OPENAI_WEBHOOK_SECRET", "OPENAI_CUSTOM_HEADERS",
        "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN",
    ),
    "gemini": (
        # GOOGLE_API_KEY wins over GEMINI_API_KEY in google-genai: left in, the SDK would
        # send it and not the placeholder.
        "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_API_KEY", "GOOGLE_GENAI_ACCESS_TOKEN",
        "GOOGLE_GENAI_DEFAULT_HEADERS",
    ),
    "openrouter": ("OPENROUTER_API_KEY",),
}

# Variables that send a named provider's SDK somewhere other than the verb, or choose
# another identity there (a profile, federation, Vertex, Azure, an organisation or
# project the key's owner did not choose: the proxy removes those headers too). Taken
# out for each named provider; a provider not named keeps them (GOOGLE_CLOUD_PROJECT
# belongs to every Google Cloud tool, not only Gemini's).
ROUTE_VARIABLES: dict[str, tuple[str, ...]] = {
    "anthropic": (
        "ANTHROPIC_PROFILE", "ANTHROPIC_CONFIG_DIR", "ANTHROPIC_IDENTITY_TOKEN_FILE",
        "ANTHROPIC_FEDERATION_RULE_ID", "ANTHROPIC_ORGANIZATION_ID",
        "ANTHROPIC_SERVICE_ACCOUNT_ID", "ANTHROPIC_WORKSPACE_ID", "ANTHROPIC_SCOPE",
        "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_BEDROCK_MANTLE_BASE_URL",
        "ANTHROPIC_VERTEX_BASE_URL", "ANTHROPIC_VERTEX_PROJECT_ID",
        "ANTHROPIC_FOUNDRY_BASE_URL", "ANTHROPIC_FOUNDRY_RESOURCE",
        "ANTHROPIC_AWS_BASE_URL", "ANTHROPIC_AWS_WORKSPACE_ID",
        "ANTHROPIC_GOOGLE_CLOUD_BASE_URL", "ANTHROPIC_GOOGLE_CLOUD_PROJECT",
        "ANTHROPIC_GOOGLE_CLOUD_LOCATION", "ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID",
        # Claude Code's switches to Bedrock, Vertex and Foundry.
        "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY",
    ),
    "openai": (
        "OPENAI_ORG_ID", "OPENAI_ORGANIZATION", "OPENAI_PROJECT_ID", "OPENAI_API_TYPE",
        "AZURE_OPENAI_ENDPOINT", "OPENAI_API_BASE",
    ),
    "gemini": (
        "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_VERTEX_BASE_URL",
        "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_GENAI_USER_PROJECT",
    ),
    "openrouter": (),
}

FOREIGN_KEY_NOTE = ("{names} looked like real keys: a model verb is on, so the sandbox "
                    "holds no provider's key (each named provider's goes in from Link's "
                    "secrets, at the proxy)")
# A run of this many key characters (letters, digits, '-', '_') is what a key looks
# like (Gemini's 39, OpenRouter's 73, Anthropic's over 100); "x" or "dummy" is not.
_KEY_RUN = 16
_KEY_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                            "0123456789-_")


class ModelEnvError(Exception):
    """The agent's placeholder cannot be made or read as it must be; nothing runs."""


def verb_base(provider: str, proxy_address: str, proxy_port: int) -> str:
    """The base URL of `provider`'s SDK: the verb, plus the provider's own root."""
    _, root, _ = PROVIDER_VARIABLES[provider]
    return f"http://{proxy_address}:{proxy_port}/_link/model/{provider}{root}"


def is_placeholder(text: str) -> bool:
    return (len(text) == PLACEHOLDER_LENGTH and text.startswith(PLACEHOLDER_PREFIX)
            and all(character in _HEX for character in text[len(PLACEHOLDER_PREFIX):]))


def _looks_like_key(value: str) -> bool:
    if is_placeholder(value):
        return False
    run = 0
    for character in value:
        run = run + 1 if character in _KEY_CHARACTERS else 0
        if run >= _KEY_RUN:
            return True
    return False


# Where Link's store keeps a secret by its name (lnk_common.secrets.SECRETS_FOLDER; not
# imported: that module's `re` costs every start with a model verb a few ms).
_STORE = ("sandbox", "secrets")


def keys_not_set(settings: str, models: tuple[str, ...]) -> list[str]:
    """The providers of `models` whose key Link's store does not hold (a regular file
    named for the provider): said at start, since each call of theirs is refused (403,
    final) until `lnk-sandbox secret set PROVIDER`. Read by name, never opened."""
    import stat

    missing = []
    for provider in models:
        try:
            info = os.stat(os.path.join(settings, *_STORE, provider), follow_symlinks=False)
        except OSError:
            missing.append(provider)
            continue
        if not stat.S_ISREG(info.st_mode):
            missing.append(provider)
    return missing


def sandbox_environment(env: Mapping[str, str], models: tuple[str, ...], placeholder: str,
                        *, proxy_address: str, proxy_port: int
                        ) -> tuple[dict[str, str], list[str]]:
    """The program's environment for a policy whose model verb names `models`, and the
    lines to say on stderr. Without models, `env` as it is (a program may bring its own
    key through `[network] hosts`; nothing of ours is in the way)."""
    result = dict(env)
    if not models:
        return result, []
    taken = [name for provider in KEY_VARIABLES for name in KEY_VARIABLES[provider]]
    taken += [name for provider in models for name in ROUTE_VARIABLES[provider]]
    looked_like_keys = [name for name in taken
                        if name in result and _looks_like_key(result[name])]
    for name in taken:
        result.pop(name, None)
    for provider in models:
        base_variable, _, key_variable = PROVIDER_VARIABLES[provider]
        result[base_variable] = verb_base(provider, proxy_address, proxy_port)
        result[key_variable] = placeholder
    notes = []
    if looked_like_keys:
        notes.append(FOREIGN_KEY_NOTE.format(names=", ".join(looked_like_keys)))
    return result, notes


def new_placeholder() -> str:
    return PLACEHOLDER_PREFIX + os.urandom(PLACEHOLDER_BYTES).hex()


# -- the agent's placeholder, kept in Link's settings ---------------------------------------

# Under the settings root: `sandbox/` is hidden in every sandbox with the rest of Link's
# settings, and unlike `agents/<name>` no sandbox writes it.
AGENT_FOLDER = ("sandbox", "agents")
PLACEHOLDER_FILE = "model-placeholder"
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FOLDER_MODE = 0o700
_FILE_MODE = 0o600


def placeholder_for(policy: Policy) -> str:
    """The run's placeholder: the agent's own, kept across runs, or a new one."""
    if not policy.agent:
        return new_placeholder()
    return _agent_placeholder(policy.settings, policy.agent)


def _open_folder(parent: int | None, name: str, shown: str, *, strict: bool) -> int:
    """Open (making it 0700 if missing) `name` in `parent` as a folder, never through a
    link; `strict`: refuse one that is not ours or is open to others."""
    try:
        os.mkdir(name, _FOLDER_MODE, dir_fd=parent)
    except FileExistsError:
        pass
    except OSError as error:
        raise ModelEnvError(f"cannot make {shown}: {error.strerror}") from None
    try:
        fd = os.open(name, _OPEN_FOLDER, dir_fd=parent)
    except OSError as error:
        raise ModelEnvError(f"{shown} is not a folder (a link or a file is there); refused, "
                            f"nothing followed: {error.strerror}") from None
    info = os.fstat(fd)
    if strict and (info.st_uid != os.geteuid() or info.st_mode & 0o077):
        os.close(fd)
        raise ModelEnvError(f"{shown} must be yours and 0700 (it is "
                            f"{info.st_mode & 0o7777:04o}, owner {info.st_uid}); refused")
    return fd


def _agent_placeholder(settings: str, agent: str) -> str:
    return agent_value(settings, agent, PLACEHOLDER_FILE, new_placeholder, is_placeholder,
                       "a placeholder (lnk- and 40 lowercase hex characters)")


def agent_value(settings: str, agent: str, file: str, make: Callable[[], str],
                valid: Callable[[str], bool], what: str) -> str:
    """The value kept in `sandbox/agents/<agent>/<file>` of Link's settings, made with
    `make` when missing (the first of racing launchers wins), read back strictly (`valid`,
    `what` for the message): an agent's placeholder, or its URL secret."""
    shown = settings
    folder = _open_folder(None, settings, shown, strict=False)
    try:
        for index, part in enumerate((*AGENT_FOLDER, agent)):
            shown = os.path.join(shown, part)
            # The agents' folder and the agent's own are ours alone (0700): another user
            # who could write there could choose the placeholder.
            inner = _open_folder(folder, part, shown, strict=index > 0)
            os.close(folder)
            folder = inner
        shown = os.path.join(shown, file)
        try:
            return _read_value(folder, file, shown, valid, what)
        except FileNotFoundError:
            pass
        _make_value(folder, file, shown, make)
        return _read_value(folder, file, shown, valid, what)
    finally:
        os.close(folder)


def _make_value(folder: int, file: str, shown: str, make: Callable[[], str]) -> None:
    """Write a new placeholder to a temp file and link it into place: link never
    replaces, so of two launchers of one agent the first wins and both read its value,
    whole (a reader never sees a file being written)."""
    temp = f".tmp-{file}-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 _FILE_MODE, dir_fd=folder)
    try:
        os.fchmod(fd, _FILE_MODE)  # a umask can only take bits away; set it exactly
        os.write(fd, make().encode("ascii"))
        os.fsync(fd)
        os.close(fd)
        fd = -1
        try:  # noqa: SIM105 (contextlib is one more import at a start)
            os.link(temp, file, src_dir_fd=folder, dst_dir_fd=folder,
                    follow_symlinks=False)
        except FileExistsError:
            pass  # another launcher of this agent made it first: its value is the one
    except OSError as error:
        raise ModelEnvError(f"cannot make {shown}: {error.strerror}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        try:  # noqa: SIM105
            os.unlink(temp, dir_fd=folder)
        except FileNotFoundError:
            pass


# A kept value is short: a placeholder is 44 characters, a URL secret 64.
MAX_KEPT_VALUE = 256


def _read_value(folder: int, file: str, shown: str, valid: Callable[[str], bool],
                what: str) -> str:
    """The value kept at `shown`, read strictly: a regular file, ours, 0600, holding
    exactly what `valid` takes; else refused with the fix."""
    fix = "remove it, and the next run makes a new one (the agent's harness then needs it)"
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise ModelEnvError(f"{shown} cannot be opened ({error.strerror}; a link is "
                            f"refused): {fix}") from None
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000) == 0o100000:
            raise ModelEnvError(f"{shown} is not a regular file: {fix}")
        if info.st_uid != os.geteuid() or info.st_mode & 0o7777 != _FILE_MODE:
            raise ModelEnvError(f"{shown} must be yours and 0600 (it is "
                                f"{info.st_mode & 0o7777:04o}, owner {info.st_uid}): {fix}")
        data = os.read(fd, MAX_KEPT_VALUE + 1)
    finally:
        os.close(fd)
    text = data.decode("ascii", "replace")
    if not valid(text):
        raise ModelEnvError(f"{shown} does not hold {what}: {fix}")
    return text
