"""bench/channels.py keeps working: its smallest run (one round, a few sends) delivers through
the outbox to its local receivers with 1, 4 and 16 channels and writes its section of a
RESULTS file. How fast is the benchmark's business, not this test's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

BENCH = Path(__file__).parents[2] / "bench" / "channels.py"


def test_the_smallest_run_writes_its_section(tmp_path):
    results = tmp_path / "RESULTS.md"
    run = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--sends", "32",
                          "--paced", "5", "--results", str(results)], capture_output=True,
                         text=True, timeout=110)
    assert run.returncode == 0, run.stdout + run.stderr
    text = results.read_text()
    assert "## Alert delivery through the outbox (channels)" in text
    for n in (1, 4, 16):
        assert re.search(rf"^\| {n} \| \d+ \| \d+\.\d\d \|$", text, re.M), text
    assert re.search(r"^\| an alert's commit -> its POST's first byte \| [\d.]+ ms \| "
                     r"[\d.]+ ms \|$", text, re.M), text
