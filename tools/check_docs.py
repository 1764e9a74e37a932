#!/usr/bin/env python3
"""Check the docs split lost nothing, and that relative links resolve.

    tools/check_docs.py [--old REV]   (default: the docs/ARCHITECTURE.md of 1aebcaf)

1. Every backticked token and every number with a unit of the old docs/ARCHITECTURE.md
   appears (whitespace folded) in docs/*.md + docs/decisions/*.md; also every test
   file and bench named.
2. Every relative Markdown link in README.md, docs/ and examples/ resolves to a file,
   and, where it has an anchor, to a heading of that file (GitHub's slugs).
Prints what is missing; exit 1 if anything is. A sentence edited since the split (the
helper table's two rows, the harness record's "Not tested" line) shows as missing
here: the check is of the move, against the file as it was before it; the links part
holds for every later edit.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
rev = sys.argv[sys.argv.index("--old") + 1] if "--old" in sys.argv else "1aebcaf"
old = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:docs/ARCHITECTURE.md"],
                     check=True, capture_output=True, text=True).stdout


def fold(t: str) -> str:
    return re.sub(r"\s+", " ", t)


new_files = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs/decisions").glob("*.md"))
new = fold("\n".join(p.read_text() for p in new_files))
fences = re.findall(r"^```.*?^```", old, flags=re.S | re.M)
prose = re.sub(r"^```.*?^```", "", old, flags=re.S | re.M)
oldf = fold(prose)
tokens = {fold(line).strip() for f in fences for line in f.splitlines()[1:-1] if line.strip()}
for para in re.split(r"\n\s*\n", prose):
    tokens |= {fold(t) for t in re.findall(r"`[^`]+`", para)}
tokens |= {m.group(0) for m in re.finditer(r"\d+(\.\d+)? ?(ms|µs|s|%|MB|KiB|MiB)\b", oldf)}
tokens |= set(re.findall(r"\b(?:tests|bench)/[A-Za-z0-9_./-]*[A-Za-z0-9_]", oldf))
missing = sorted(t for t in tokens if t not in new)
for t in missing:
    print("missing token:", t)
print(f"tokens: {len(tokens)} checked, {len(missing)} missing")
# and every sentence of the old prose (headings aside), whitespace folded
sentences = set()
for para in re.split(r"\n\s*\n", prose):
    para = "\n".join(x for x in para.splitlines() if not x.startswith("#"))
    for sent in re.split(r"(?<=[.!?)])\s+(?=[A-Z`*(])", fold(para).strip()):
        if sent:
            sentences.add(sent.lstrip("- ").strip())
lost = sorted(x for x in sentences if x and x not in new)
for x in lost:
    print("missing sentence:", x[:160])
print(f"sentences: {len(sentences)} checked, {len(lost)} missing")
missing += lost


def slug(h: str) -> str:
    h = h.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


bad = 0
link_files = [ROOT / "README.md", *new_files, *sorted((ROOT / "examples").rglob("*.md"))]
link_files = [p for p in link_files if "install" not in p.parts and "node_modules" not in p.parts]
for p in link_files:
    text = p.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        f = (p.parent / path).resolve() if path else p
        if not f.exists():
            print(f"{p.relative_to(ROOT)}: no such file: {target}")
            bad += 1
            continue
        if anchor and f.suffix == ".md":
            heads = [slug(h) for h in re.findall(r"^#+ (.*)$", f.read_text(), flags=re.M)]
            if anchor not in heads:
                print(f"{p.relative_to(ROOT)}: no heading #{anchor} in {path or p.name}")
                bad += 1
print(f"links: {bad} broken")
sys.exit(1 if missing or bad else 0)
