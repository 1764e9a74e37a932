#!/usr/bin/env python3
"""Check that the docs lost nothing when they were split, and that every link resolves.

    tools/check_docs.py [--old REV]   (default: the docs/ARCHITECTURE.md of 1aebcaf)

1. Moved, not lost: every backticked token, every line of a fenced block, every number
   with a unit, every test file and bench named, and every sentence of the old
   docs/ARCHITECTURE.md (the lab notebook before the split into docs/decisions/) appears,
   whitespace folded, somewhere in docs/ (any .md file below it). Two kinds of change
   are allowed, each listed below with its reason, never found by guessing:
   - MOVED_MODULES: a module that moved package since (c432b59, 2560062); the old text
     is read with the new name, so a record must name the module where it is now;
   - EDITED, EDITED_TOKENS: a sentence or token deliberately rewritten since the split
     (it was false, or cited a file outside the repository), named by its opening words;
   - MOVED_CITATIONS: a design note's name, now the page of docs/facts/ that restates it;
   - RECORD_LINK: a link to a record, added after a reference to its old section.
2. Every relative Markdown link in README.md, docs/ and examples/ resolves to a file or
   folder, and, where it has an anchor, to a heading of that file (GitHub's slugs).
   PENDING_RECORDS: decision records the plan (docs/decisions/0035) links to that other
   branches of issue 30 write; each is allowed missing until it exists, and the check
   fails once it does (so the entry is removed when the branch merges).

Prints what is missing; exit 1 if anything is. tests/test_docs.py runs both parts.
"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_OLD = "1aebcaf"

# Old module name (dotted or as a path) -> where the module is now.
MOVED_MODULES: dict[str, str] = {
    "lnk_common.local_models": "lnk_proxy.local_models",
    "lnk_common/local_models.py": "lnk_proxy/local_models.py",
    "lnk_common.model_rules": "lnk_proxy.model_rules",
    "lnk_common/model_rules.py": "lnk_proxy/model_rules.py",
    "lnk_common/data/search_models.txt": "lnk_proxy/data/search_models.txt",
    "lnk_common.refusal": "lnk_proxy.refusal",
    "lnk_common.tools": "lnk_proxy.tools",
    "lnk_common/tools.py": "lnk_proxy/tools.py",
    "lnk_common.placeholders": "lnk_wrap.placeholders",
    "lnk_common.landlock": "lnk_wrap.landlock",
    "lnk_common.seccomp": "lnk_wrap.seccomp",
    "lnk_common.spec": "lnk_wrap.spec",
    "lnk_common/spec.py": "lnk_wrap/spec.py",
    "lnk_common/toml.py": "lnk_wrap/vendor/tomllib.py",
    "lnk_common.toml": "lnk_wrap.vendor.tomllib",
}

# A citation of a design note outside the repository -> the page of docs/facts/ that says
# the same in our words (record 0040).
MOVED_CITATIONS: dict[str, str] = {
    "`../shared/design/PROVIDERS.md`": "[../facts/providers.md](../facts/providers.md)",
    "PROVIDERS.md": "../facts/providers.md",
}

# The opening words of a sentence of the old file rewritten on purpose -> why.
EDITED: dict[str, str] = {
    "This describes the code as it is.":
        "docs/ARCHITECTURE.md was rewritten whole (record 0040); it says what it is itself",
    "The founders' brief is `../shared/design/ARCHITECTURE.md`":
        "cited a file outside the repository; the facts are in docs/facts/ (record 0040)",
    "| helper | package | runs | job |":
        "the helpers' table, rewritten in docs/ARCHITECTURE.md (record 0040)",
    "| `lnk-sandbox-ask` | `lnk_ask.main` | outside, run by a person or a script, or (to be wired)":
        "false: the proxy runs the asker (lnk_ask.asker.ask_async); see docs/ARCHITECTURE.md",
    "`lnk_common` imports `lnk_proxy.model_rules` (a sans-IO module":
        "false since c432b59: lnk_common imports no module of lnk_proxy (tests/test_imports.py)",
    "**The core** (`lnk_proxy/local_models.py`, sans IO; in `lnk_common` so that":
        "false since c432b59: the filter is the proxy's, the relay imports it (record 0041)",
    "Not tested: the TUIs":
        "edited before this step, at the split (the harness record's 'Not tested' line)",
    "One exception type per parser: `SpecError` (`file: key: reason`; the TOML reader's":
        "an identifier renamed (record 0040): the dot files' `PlaceholderError` is "
        "`StandInError`",
}

# A token (a backticked word or a line of a fenced block) of the old file rewritten on
# purpose -> why.
EDITED_TOKENS: dict[str, str] = {
    "/bin/sh -c CHECK lnk-sandbox (the kept line's check: \"Kept lines\", below)":
        "edited at the split: the section it pointed to is record 0002 now",
    "`../shared/design/ARCHITECTURE.md`":
        "a file outside the repository; the facts are in docs/facts/ (record 0040)",
    "└─ exec /usr/bin/python3.11 -I -S …/lnk_wrap/_start.py --kept-line 1:3.11 launch":
        "the kept line's format is 2 since the policy's fields table (record 0037)",
    "[--read P]… [--write P]… [--hide P]… [--reopen P]… [--write-dot-files P]…":
        "one spelling per field: --write-dot-file, given once per folder (record 0037)",
}

# Records the plan links to that other branches of issue 30 write (docs/decisions/0035).
PENDING_RECORDS = {
}


# " ([0015](0015-settings-folder.md))", as added after "the section 'Link's settings folder'".
RECORD_LINK = re.compile(r" \(\[\d{4}\]\(\d{4}-[\w.-]+\.md\)\)")


def fold(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def docs_files() -> list[pathlib.Path]:
    return sorted((ROOT / "docs").rglob("*.md"))


def old_text(rev: str = DEFAULT_OLD) -> str:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:docs/ARCHITECTURE.md"],
                          check=True, capture_output=True, text=True).stdout
    for old, new in MOVED_MODULES.items():
        text = text.replace(old, new)
    for old, new in MOVED_CITATIONS.items():
        text = re.sub(rf"(?<![\w/.\[]){re.escape(old)}", new, text)
    return text


def missing_from_move(rev: str = DEFAULT_OLD) -> list[str]:
    """What of the old file is in no file of docs/ now (but the EDITED sentences)."""
    old = old_text(rev)
    new = fold("\n".join(p.read_text() for p in docs_files()))
    # A link to a record added after a reference to its old section is not a change.
    new = re.sub(RECORD_LINK, "", new)
    fences = re.findall(r"^```.*?^```", old, flags=re.S | re.M)
    prose = re.sub(r"^```.*?^```", "", old, flags=re.S | re.M)
    oldf = fold(prose)
    tokens = {fold(line).strip() for f in fences for line in f.splitlines()[1:-1]
              if line.strip()}
    for para in re.split(r"\n\s*\n", prose):
        tokens |= {fold(t) for t in re.findall(r"`[^`]+`", para)}
    tokens |= {m.group(0) for m in re.finditer(r"\d+(\.\d+)? ?(ms|µs|s|%|MB|KiB|MiB)\b", oldf)}
    tokens |= set(re.findall(r"\b(?:tests|bench)/[A-Za-z0-9_./-]*[A-Za-z0-9_]", oldf))
    problems = [f"missing token: {t}" for t in sorted(tokens)
                if t not in new and t not in EDITED_TOKENS]
    problems += [f"EDITED_TOKENS names a token still there or never there: {t}"
                 for t in EDITED_TOKENS if t not in tokens or t in new]
    sentences = set()
    for para in re.split(r"\n\s*\n", prose):
        para = "\n".join(x for x in para.splitlines() if not x.startswith("#"))
        for sentence in re.split(r"(?<=[.!?)])\s+(?=[A-Z`*(])", fold(para).strip()):
            if sentence:
                sentences.add(sentence.lstrip("- ").strip())
    edited = tuple(fold(e) for e in EDITED)
    problems += [f"missing sentence: {x[:160]}" for x in sorted(sentences)
                 if x and x not in new and not x.startswith(edited)]
    unused = [e for e in EDITED if not any(fold(s).startswith(fold(e)) for s in sentences)]
    problems += [f"EDITED names no sentence of the old file: {e[:80]}" for e in unused]
    kept = [e for e in EDITED if any(fold(s).startswith(fold(e)) and s in new for s in sentences)]
    problems += [f"EDITED names a sentence still there; remove it: {e[:80]}" for e in kept]
    return problems


def slug(heading: str) -> str:
    heading = heading.strip().lower()
    heading = re.sub(r"[^\w\- ]", "", heading)
    return heading.replace(" ", "-")


def broken_links() -> list[str]:
    """Every relative link of README.md, docs/ and examples/ that does not resolve."""
    files = [ROOT / "README.md", *docs_files(), *sorted((ROOT / "examples").rglob("*.md"))]
    files = [p for p in files if "install" not in p.parts and "node_modules" not in p.parts]
    problems = []
    for p in files:
        text = re.sub(r"```.*?```", "", p.read_text(), flags=re.S)
        text = re.sub(r"`[^`\n]*`", "", text)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            f = (p.parent / path).resolve() if path else p
            where = p.relative_to(ROOT)
            if not f.exists():
                if f.name in PENDING_RECORDS and f.parent == ROOT / "docs/decisions":
                    continue
                problems.append(f"{where}: no such file: {target}")
                continue
            if anchor and f.suffix == ".md":
                heads = [slug(h) for h in re.findall(r"^#+ (.*)$", f.read_text(), flags=re.M)]
                if anchor not in heads:
                    problems.append(f"{where}: no heading #{anchor} in {path or p.name}")
    problems += [f"PENDING_RECORDS: {name} exists now; remove it from the list"
                 for name in sorted(PENDING_RECORDS) if (ROOT / "docs/decisions" / name).exists()]
    return problems


def main(argv: list[str]) -> int:
    rev = argv[argv.index("--old") + 1] if "--old" in argv else DEFAULT_OLD
    moved = missing_from_move(rev)
    links = broken_links()
    for line in moved + links:
        print(line)
    print(f"moved: {len(moved)} missing; links: {len(links)} broken")
    return 1 if moved or links else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
