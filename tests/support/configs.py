"""Config files written for a test: YAML text (dedented) or data, in the test's directory."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml


def write(tmp_path: Path, text: str, name: str = "proc.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def write_data(tmp_path: Path, data: dict, name: str = "proc.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)
