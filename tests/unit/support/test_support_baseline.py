"""The baseline release of the compatibility tests (:mod:`support.baseline`): named by the
changelog's line, its packages those of its own setup.cfg, and a fleet's processes started
from it with its directory first on their path and this checkout kept off it."""

from __future__ import annotations

import sys

import pytest

from support import baseline
from support.fleet import Fleet


def test_the_changelog_names_the_baseline_else_the_default(tmp_path):
    notes = tmp_path / "CHANGELOG.md"
    assert baseline.commit(notes) == baseline.DEFAULT
    notes.write_text("# Changelog\n\nCompatibility baseline: `v1.0.0`\n\n## [1.1.0]\n")
    assert baseline.commit(notes) == "v1.0.0"
    notes.write_text("Compatibility baseline: 8346784\n")
    assert baseline.commit(notes) == "8346784"


def test_the_previous_release_is_the_last_tag_before_this_commit(tmp_path):
    """A tree at a tag is that release: it runs beside the tag before; a tree after a tag
    beside that tag; without a tag, beside the changelog's baseline."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c",
                               "user.email=t@t", *args], check=True, capture_output=True,
                              text=True).stdout.strip()
    notes = tmp_path / "CHANGELOG.md"
    notes.write_text("Compatibility baseline: 8346784\n")
    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "a")
    assert baseline.previous(notes, tmp_path) == "8346784"          # no tag yet
    git("tag", "-a", "v0.9.0", "-m", "0.9.0")                      # annotated, on HEAD
    assert baseline.previous(notes, tmp_path) == "8346784"
    git("commit", "-q", "--allow-empty", "-m", "b")
    assert baseline.previous(notes, tmp_path) == "v0.9.0"
    git("tag", "v1.0.0")                                           # lightweight, on HEAD
    git("tag", "not-a-release")
    assert baseline.previous(notes, tmp_path) == "v0.9.0"
    git("commit", "-q", "--allow-empty", "-m", "c")
    assert baseline.previous(notes, tmp_path) == "v1.0.0"


def test_a_commit_not_in_the_history_says_why():
    reason = baseline.missing("0" * 40)
    assert reason and "not in this checkout's history" in reason
    if baseline.missing(baseline.DEFAULT) is not None:
        pytest.skip("this checkout has no history (a shallow clone)")
    assert baseline._packages(baseline.DEFAULT) == [
        "agent", "fleetwatch", "plugins", "query", "router", "scheduler", "sinks", "web"]


def test_a_release_fleet_runs_the_release_in_the_fleets_directory(tmp_path):
    """Its processes: ``python -P`` (the working directory off the path) with the release's
    directory on PYTHONPATH; its directory, processes and state database the fleet's."""
    fleet = Fleet(tmp_path)
    release = baseline.Release("abc1234", tmp_path / "baseline-abc1234")
    old = baseline.ReleaseFleet(fleet, release)
    assert release.argv("router", "--config", "r.yaml") == [
        sys.executable, "-P", "-m", "fleetwatch", "router", "--config", "r.yaml"]
    assert release.env() == {"PYTHONPATH": str(tmp_path / "baseline-abc1234")}
    assert old.root == fleet.root and old.procs is fleet.procs
    fleet.state_url = "sqlite:////elsewhere.db"
    assert old.state_url == fleet.state_url
