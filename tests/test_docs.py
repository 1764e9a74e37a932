"""The docs stay true to the code: the module map names every module and only modules,
every component has its page, every relative link and every citation in the code resolves
inside the repository, and the split of the old architecture notebook lost nothing
(tools/check_docs.py). docs/decisions/0040-docs-for-a-newcomer.md says why."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGES = sorted(p.name for p in ROOT.glob("lnk_*") if (p / "__init__.py").exists())
# The longest docs/ARCHITECTURE.md may be: it is read whole by a newcomer (issue 30).
ARCHITECTURE_MAX_LINES = 300
# What each component's page says, in this order (docs/components/README.md).
COMPONENT_HEADINGS = ["Job", "Trust", "Order of operations", "Core and shell", "Errors",
                      "Tests", "Records"]
# Citations of files that are not in the repository (the design notes the code was first
# written from); their facts are in docs/facts/ now. `/work/shared/design/…` as a path a
# test tries to read from inside a sandbox is an attack's target, not a citation.
OUTSIDE_CITATION = re.compile(
    r"VERIFIED-FACTS|(?<![\w/])(?:PROVIDERS|INVARIANTS|MACOS)\.md|\.\./shared/design")
CITED_DOC = re.compile(
    r"\bdocs/(?:facts/|components/|decisions/)?[\w.-]+\.md(?: §(\d+(?:\.\d+)?))?")


def _check_docs() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "tools/check_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _modules() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "__init__.py":
                found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def _module_map() -> list[str]:
    text = (DOCS / "ARCHITECTURE.md").read_text()
    section = text.split("\n## Module map\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(lnk_[\w.]+)` \|", section, flags=re.M)


def test_module_map_names_every_module_once_and_nothing_else() -> None:
    named = _module_map()
    assert len(named) == len(set(named)), "a module is named twice in the map"
    assert sorted(_modules() - set(named)) == [], "modules missing from the module map"
    assert sorted(set(named) - _modules()) == [], "the module map names what is no module"


def test_architecture_is_short() -> None:
    lines = (DOCS / "ARCHITECTURE.md").read_text().count("\n")
    assert lines < ARCHITECTURE_MAX_LINES


def test_every_package_has_its_page_in_the_same_shape() -> None:
    for package in PACKAGES:
        page = DOCS / "components" / f"{package}.md"
        assert page.exists(), f"no page for {package}"
        headings = re.findall(r"^## (.*)$", page.read_text(), flags=re.M)
        assert [h for h in headings if h in COMPONENT_HEADINGS] == COMPONENT_HEADINGS, page


def test_every_test_file_a_page_names_exists() -> None:
    for page in sorted((DOCS / "components").glob("*.md")):
        for name in re.findall(r"\b(test_\w+\.py)\b", page.read_text()):
            assert (ROOT / "tests" / name).exists(), f"{page.name} names {name}"


def test_every_relative_link_resolves() -> None:
    assert _check_docs().broken_links() == []


def _need_history() -> None:
    """The move is checked against the old notebook in git history (1aebcaf): a copy
    without it fails, never skips (CI's ordinary user's run, which copies the files
    without .git, does not run this module: tests/conftest.py NOT_USER_DEPENDENT)."""
    if not (ROOT / ".git").exists():
        pytest.fail("the docs' move is checked against git history: run from a git clone")


def test_the_split_lost_nothing() -> None:
    _need_history()
    assert _check_docs().missing_from_move() == []


def test_tools_check_docs_passes_as_a_script() -> None:
    _need_history()
    done = subprocess.run([sys.executable, str(ROOT / "tools/check_docs.py")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def _code_files() -> list[pathlib.Path]:
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*")
             if p.suffix in (".py", ".txt", ".patch", ".md") and p.is_file()]
    files += [p for p in (ROOT / "tests").glob("*.py") if p.name != "test_docs.py"]
    files += [p for p in (ROOT / "bin").iterdir() if p.is_file()]
    files += [p for p in (ROOT / "tools").glob("*.py") if p.name != "check_docs.py"]
    files += [ROOT / "pyproject.toml"]
    return files


def test_every_citation_in_the_code_resolves_inside_the_repository() -> None:
    problems = []
    for path in _code_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        where = path.relative_to(ROOT)
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE_CITATION.search(line):
                problems.append(f"{where}:{number}: cites a file outside the repository")
            for m in CITED_DOC.finditer(line):
                cited = ROOT / m.group(0).split(" §")[0]
                if not cited.exists():
                    problems.append(f"{where}:{number}: no such file {cited.relative_to(ROOT)}")
                elif m.group(1) and not re.search(
                        rf"^#+ {re.escape(m.group(1))}\.? ", cited.read_text(), flags=re.M):
                    problems.append(f"{where}:{number}: no section §{m.group(1)} in "
                                    f"{cited.relative_to(ROOT)}")
    assert problems == []


def test_glossary_defines_each_word_once() -> None:
    words = re.findall(r"^\| \*\*(.+?)\*\* \|", (DOCS / "glossary.md").read_text(), flags=re.M)
    assert words and len(words) == len(set(words))


def test_spec_doc_names_every_key_the_loader_takes_and_no_other() -> None:
    from lnk_proxy import secret_rules
    from lnk_wrap import spec

    text = (DOCS / "SPEC.md").read_text()
    rules_at = text.index("\n## Secret rules")
    documented = set(re.findall(r"^\| `([^`]+)` \|", text[:rules_at], flags=re.M))
    taken = set(spec._TOP_LEVEL) | {f"[{section}] {key}" for section, keys in spec._SCHEMA.items()
                        if isinstance(keys, dict) for key in keys}
    not_built = {key for key in taken - documented if f"`{key}` (macOS)" in text}
    assert taken - not_built == documented
    rule_keys = set(re.findall(r"^\| `([^`]+)` \|", text[rules_at:], flags=re.M))
    assert rule_keys == set(secret_rules._RULE_KEYS)
