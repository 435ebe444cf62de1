"""Writing a benchmark's section into bench/RESULTS.md, replacing its previous figures."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def write_section(path: Path, heading: str, command: str, body: str, notes: str) -> None:
    """Replace (or append) the section starting at ``heading`` with fresh figures."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = (f"{heading}\n\n{time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores, "
               f"Python {sys.version.split()[0]}. Command:\n\n    {command}\n\n{body}\n\n{notes}")
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("" if end < 0 else text[end + 1:])
    path.write_text(text)
