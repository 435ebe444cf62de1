"""The docs stay true to the tree: every relative link in a Markdown file of the repository
(README.md, SECURITY.md, docs/, the READMEs beside the code) reaches a file, and a heading
where it names one; and nothing cites a document outside the repository.

Links are read from the Markdown source outside code: ``[text](target)``; web addresses are
not followed. An anchor is checked against the target's headings, slugged the way GitHub
does (lower case, punctuation dropped, spaces to hyphens, ``-1``... for repeats).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: what no file may cite: notes kept outside the repository (split so that this file does
#: not match itself)
OUTSIDE = [s.replace("|", "") for s in (
    "DEPENDENCY-|NOTES", "PERF-|NOTES", "SPEC-|QUESTIONS", "the design |brief",
    "BRIEF |point", "DESIGN|.md", "../|shared")]

LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def text_files() -> list[Path]:
    """Tracked and new (not ignored) files; without git, the tree minus the ignored kinds."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True,
                             timeout=30, check=True).stdout
        paths = [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", ".demo", "__pycache__", ".hypothesis", "build", "dist"}
        paths = [p for p in ROOT.rglob("*")
                 if not skip.intersection(p.relative_to(ROOT).parts)
                 and not any(part.endswith(".egg-info") for part in p.parts)]
    return [p for p in paths if p.is_file()]


def doc_files() -> list[Path]:
    """README.md and docs/ first, then every other Markdown file of the repository."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return docs + sorted(p for p in text_files() if p.suffix == ".md" and p not in docs)


def prose_lines(text: str):
    """(line number, line) outside fenced code, inline code spans blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, CODE_SPAN.sub("", line)


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)     # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path):
    for n, line in prose_lines(path.read_text()):
        for m in (*LINK.finditer(line), *IMAGE.finditer(line)):
            yield n, m.group(1)


def broken(path: Path) -> list[str]:
    problems = []
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):    # http:, https:, mailto:
            continue
        where, _, anchor = target.partition("#")
        dest = (path.parent / where).resolve() if where else path
        name = f"{path.relative_to(ROOT)}:{n}: {target}"
        if not dest.exists():
            problems.append(f"{name}: no such file")
        elif not str(dest).startswith(str(ROOT)):
            problems.append(f"{name}: outside the repository")
        elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{name}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_a_file_and_heading(path):
    assert broken(path) == []


def test_the_docs_tree_is_linked_from_its_index():
    index = (ROOT / "docs" / "README.md").read_text()
    pages = [p for p in (ROOT / "docs").rglob("*.md") if p.name != "README.md"]
    unlinked = [str(p.relative_to(ROOT / "docs")) for p in pages
                if str(p.relative_to(ROOT / "docs")) not in index]
    assert unlinked == []


def test_slugs_as_github_makes_them():
    assert slug("Looking at the fleet: `fleetwatch status`") == \
        "looking-at-the-fleet-fleetwatch-status"
    assert slug("ansible-core 2.19") == "ansible-core-219"
    assert slug("The agent's identity") == "the-agents-identity"


def test_nothing_cites_a_document_outside_the_repository():
    found = []
    for path in text_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue
        text = data.decode("utf-8", "replace")
        for n, line in enumerate(text.splitlines(), 1):
            for word in OUTSIDE:
                if word.lower() in line.lower():
                    found.append(f"{path.relative_to(ROOT)}:{n}: {word}")
    assert found == []


DOC_CITATION = re.compile(r"(?<![\w/.-])(?:\.\./)*(docs/[\w/.-]+?\.md)(?:#([\w-]+))?")


def test_docs_cited_in_code_and_comments_exist():
    """A comment or docstring that sends the reader to a page of docs/ (and a heading of
    it: ``docs/development/decisions.md#graphyte``) finds both."""
    missing = []
    for path in text_files():
        if path.suffix not in (".py", ".cfg", ".yml", ".yaml", ".j2", ".toml", ".md", ".ini"):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in DOC_CITATION.finditer(line):
                page, anchor = ROOT / m.group(1), m.group(2)
                if not page.is_file():
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {m.group(1)}")
                elif anchor and anchor not in anchors(page):
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {m.group(1)}#{anchor}")
    assert missing == []
