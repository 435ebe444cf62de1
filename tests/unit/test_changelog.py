"""CHANGELOG.md keeps its form (Keep a Changelog: ``[Unreleased]``, then each release as
``## [X.Y.Z] - YYYY-MM-DD``, newest first, its changes under the six headings), its newest
release is the version the package says (``fleetwatch.__version__``, the one source), and
it names the compatibility baseline in one line the compatibility test reads
(tests/support/baseline.py)."""

from __future__ import annotations

import re

from fleetwatch import __version__
from query.versions import order
from support import ROOT

CHANGELOG = ROOT / "CHANGELOG.md"
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$")
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
BASELINE = re.compile(r"^Compatibility baseline: ([0-9a-f]{7,40}|v\d+\.\d+\.\d+)$")


def sections() -> list[tuple[str, list[str]]]:
    """(a ``## `` heading, the lines under it) in the file's order; the title first."""
    found: list[tuple[str, list[str]]] = [("", [])]
    for line in CHANGELOG.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            found.append((line, []))
        else:
            found[-1][1].append(line)
    return found


def test_the_changelog_has_unreleased_then_releases_newest_first():
    heads = [head for head, _ in sections()[1:]]
    assert sections()[0][1][0] == "# Changelog"
    assert heads[0] == "## [Unreleased]"
    releases = [RELEASE.match(h) for h in heads[1:]]
    assert all(releases), [h for h, m in zip(heads[1:], releases) if not m]
    versions = [m.group(1) for m in releases]
    assert versions == sorted(versions, key=order) and len(set(versions)) == len(versions)
    dates = [m.group(2) for m in releases]
    assert dates == sorted(dates, reverse=True)


def test_the_newest_release_is_the_packages_version():
    newest = RELEASE.match(sections()[2][0])
    assert newest.group(1) == __version__


def test_each_release_sorts_its_changes_under_the_six_kinds_in_their_order():
    for head, lines in sections()[1:]:
        kinds = [line[4:] for line in lines if line.startswith("### ")]
        assert all(k in KINDS for k in kinds), (head, kinds)
        assert kinds == sorted(kinds, key=KINDS.index), head
        assert not [line for line in lines if line.startswith("#### ")], head


def test_the_newest_release_names_the_compatibility_baseline_once():
    found = [(head, line) for head, lines in sections() for line in lines
             if line.startswith("Compatibility baseline")]
    assert len(found) == 1 and found[0][0] == sections()[2][0]
    assert BASELINE.match(found[0][1]), found[0][1]
