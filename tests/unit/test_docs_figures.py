"""Figures that drifted once (issue 31, item 20: README said 3,130 tests and 17 minutes, and
870 MB of .venv, long after they were 3,870, 30 and 1.5 GB) are kept in one place each: the
suite's size and time in docs/development/testing.md, what each step of `make install` takes
in the Makefile's ``TAKES_*`` (printed before the step), which README.md quotes word for
word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: "3,870 tests", "about 2,900 unit tests": a count of the suite's tests
COUNT = re.compile(r"\b\d[\d,]* (?:unit |integration )?tests\b")


def words(text: str) -> str:
    return " ".join(text.split())


def takes() -> dict[str, str]:
    """The Makefile's ``TAKES_*`` variables, continuation lines joined."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    return {m.group(1): words(m.group(2))
            for m in re.finditer(r"^(TAKES_\w+) := (.+)$", text, re.MULTILINE)}


def test_readme_quotes_what_each_install_step_takes():
    figures = takes()
    assert set(figures) == {"TAKES_SYSTEM", "TAKES_JAVA", "TAKES_VENV", "TAKES_ASSETS"}
    readme = words((ROOT / "README.md").read_text())
    for name, figure in figures.items():
        assert figure in readme, f"README.md does not quote the Makefile's {name}: {figure}"
    makefile = (ROOT / "Makefile").read_text()
    for name in figures:                 # each said on the line before its step
        assert f"($({name}))" in makefile, name


def test_the_suite_is_counted_in_one_place_only():
    home = ROOT / "docs" / "development" / "testing.md"
    assert COUNT.search(home.read_text())
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    counted = {str(p.relative_to(ROOT)): COUNT.findall(p.read_text())
               for p in pages if p != home and COUNT.search(p.read_text())}
    assert counted == {}, "counts of tests belong in docs/development/testing.md"
