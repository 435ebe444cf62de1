"""docs/reference/ is generated from the code (docs/generate.py): the committed files must be
what the generator writes now, so a new setting, a changed default or help text, a new
command or option fails here until the reference is regenerated.

In memory only: the generator imports the config dataclasses and builds each command's
argparse parser; no process, no file written.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generate():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_reference_is_what_the_code_generates(generate):
    for path, text in generate.render().items():
        name = path.relative_to(ROOT)
        assert path.exists(), f"{name} is missing: run {generate.REGENERATE}"
        committed = path.read_text(encoding="utf-8")
        if committed != text:
            diff = difflib.unified_diff(committed.splitlines(), text.splitlines(),
                                        f"{name} (committed)", f"{name} (from the code)",
                                        lineterm="", n=1)
            shown = "\n".join(list(diff)[:40])
            pytest.fail(f"{name} differs from the code: run {generate.REGENERATE}\n{shown}",
                        pytrace=False)


def test_every_setting_has_help(generate):
    for path, _, cls in generate.config_files():
        missing = [row.key for row in generate.settings(cls) if not row.help.strip()]
        assert not missing, f"settings of {path} without help in their setting(): {missing}"


def test_every_setting_type_has_a_name(generate):
    """A type the walk does not know would show as Python's repr in the reference."""
    words = {"string", "integer", "number", "boolean", "any", "section", "mapping", "list",
             "of", "to", "or", "null", "strings", "integers", "numbers", "booleans", "mappings"}
    for path, _, cls in generate.config_files():
        for row in generate.settings(cls):
            assert set(row.type.split()) <= words, f"{path}: {row.key}: {row.type}"


def test_help_is_wrapped_at_a_fixed_width_whatever_the_terminal(generate, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    wide = generate.cli_md()
    monkeypatch.setenv("COLUMNS", "40")
    assert generate.cli_md() == wide
    assert os.environ["COLUMNS"] == "40"            # given back as it was


def test_a_default_holding_a_path_of_this_machine_is_refused(generate, monkeypatch):
    monkeypatch.setattr(generate, "config_md", lambda: f"| `x` | `{generate.ROOT}/y` |\n")
    with pytest.raises(SystemExit, match="a path of this machine"):
        generate.render()
