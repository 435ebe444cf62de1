"""Globs in SQL (query/globbing.py) match what Python's fnmatchcase matches in the sinks: each
pattern against each name, in SQLite's GLOB and PostgreSQL's regular expressions, with the
case kept or folded."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

pytest.importorskip("sqlalchemy")

from sqlalchemy import Column, MetaData, String, Table, create_engine, select  # noqa: E402

from query import globbing  # noqa: E402

NAMES = ["web-1", "web-12", "WEB-3", "db-1", "web.1", "web[1]", "a*b", "a?b", "x^y", "x$y",
         "x\\y", "", "web-", "-web", "disk_root", "disk/root", "é-1", "web-1\nx"]
PATTERNS = ["web-*", "WEB-*", "web-?", "web-[0-9]", "web-[!0-9]*", "web-[a-]", "*", "?",
            "web.1", "web[1]", "web[[]1]", "a[*]b", "a[?]b", "a*b", "x^y", "x$y", "x\\y",
            "[", "web-[", "*]", "[]]", "[!]]*", "disk_*", "*/*", "[^x]*", "web-1*"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def names(request):
    """(a connection to a table of NAMES, the dialect's name)."""
    if request.param == "sqlite":
        engine = create_engine("sqlite://")
    else:
        pytest.importorskip("psycopg")
        engine = create_engine(request.getfixturevalue("pg_cluster").create_database())
    table = Table("names", MetaData(), Column("name", String(64)))
    table.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"name": n} for n in NAMES])
    with engine.connect() as conn:
        yield conn, table, request.param
    engine.dispose()


@pytest.mark.parametrize("fold", [False, True], ids=["case kept", "case folded"])
def test_every_pattern_matches_what_fnmatchcase_matches(names, fold):
    conn, table, dialect = names
    wrong = {}
    for pattern in PATTERNS:
        found = set(conn.scalars(select(table.c.name).where(
            globbing.glob(table.c.name, pattern, dialect, fold=fold))))
        if fold:            # SQLite folds ASCII letters only (said in query/globbing.py)
            expected = {n for n in NAMES if fnmatchcase(n.lower(), pattern.lower())}
        else:
            expected = {n for n in NAMES if fnmatchcase(n, pattern)}
        if found != expected:
            wrong[pattern] = (sorted(found - expected), sorted(expected - found))
    assert wrong == {}


def test_wildcards_are_told():
    assert globbing.has_wildcards("web-*") and globbing.has_wildcards("db[12]")
    assert not globbing.has_wildcards("web-1")
