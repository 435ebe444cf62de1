"""What the benchmarks share: writing a section into bench/RESULTS.md (replacing its previous
figures), waiting for a condition with a deadline, percentiles."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path


def write_section(path: Path, heading: str, command: str, body: str, notes: str) -> None:
    """Replace (or append) the section starting at ``heading`` with fresh figures."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = (f"{heading}\n\n{time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores, "
               f"Python {sys.version.split()[0]}. Command:\n\n    {command}\n\n{body}\n\n"
               f"{notes.strip()}\n")
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("" if end < 0 else "\n" + text[end + 1:])
    path.write_text(text)


def wait(pred, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``pred`` until it is true; stop the benchmark after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``; NaN for none."""
    values = sorted(values)
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))]
