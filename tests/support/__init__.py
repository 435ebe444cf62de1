"""The tests' support package (docs/development/testing.md lists its modules)."""

from pathlib import Path

#: the project's root: the checkout the tests run from
ROOT = Path(__file__).resolve().parents[2]
