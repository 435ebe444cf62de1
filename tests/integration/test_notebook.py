"""notebooks/fleet-history.ipynb runs, cell after cell, against the generated lake (no Jupyter
server: its code cells are executed in order in one namespace, as a kernel would)."""

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "fleet-history.ipynb"


def code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_notebook_is_clean_nbformat_4():
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
    ids = [c["id"] for c in nb["cells"]]
    assert len(ids) == len(set(ids))
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["source"], list)
        if cell["cell_type"] == "code":  # committed without outputs
            assert cell["outputs"] == [] and cell["execution_count"] is None
    try:
        import nbformat
    except ImportError:
        return
    nbformat.validate(nbformat.reads(NOTEBOOK.read_text(), as_version=4))


@pytest.mark.timeout(300)  # a dozen Spark queries in a row: ~20 s alone, more on a busy machine
def test_notebook_runs_without_matplotlib(spark, history_lake, monkeypatch, capsys):
    """Every cell, in order, on the worker's Spark, as on a machine without matplotlib (the
    tables say what the plots would). With matplotlib, the plots are drawn by the notebook
    run in a real Jupyter kernel (test_history_cluster.py: on local Spark and through Spark
    Connect, five images at least): running every query here a second time, with plots,
    cost the suite a minute and a half on 2 cores."""
    monkeypatch.setenv("FLEETWATCH_HISTORY", str(history_lake.path))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    ns = {"__name__": "__main__"}
    for i, source in enumerate(code_cells()):
        exec(compile(source, f"{NOTEBOOK.name} code cell {i + 1}", "exec"), ns)
    out = capsys.readouterr().out
    assert ns["plt"] is None
    assert ns["h"].lake == str(history_lake.path)
    assert (ns["HOST"], ns["METRIC"]) == ("web1", "cpu.user")
    assert [r["count"] for r in ns["series"]] == [5] * 8
    assert [r["hostname"] for r in ns["top"]] == ["web1", "web2-old", "db1"]
    assert len(ns["timeline"]) == 6 and len(ns["alerts"]) == 5 and len(ns["notes"]) == 3
    assert len(ns["availability"]) == 6
    assert [r["kind"] for r in ns["lifecycle"]] == ["alert", "alert", "downtime", "downtime"]
    assert sum(r["down_seconds"] for r in ns["availability"]) - \
        sum(r["down_seconds"] for r in ns["planned"]) == 3600.0    # web1's downtime
    assert [(r["hostname"], r["plugin"], r["runs"], r["not_ok"]) for r in ns["by_check"]] == [
        ("web1", "load", 7, 3), ("db1", "disk", 2, 1), ("web2-old", "http", 1, 1)]
    assert "metrics                  57 rows" in out and "cpu.user on web1" in out
    # no data or dropped: web1's D0, hour by hour (tests/support/lakegen.py "drops")
    assert ns["DAY"] == datetime.fromtimestamp(history_lake.base, timezone.utc).strftime(
        "%Y-%m-%d")
    assert [i for i, r in enumerate(ns["gaps"]) if r["verdict"] != "ok"] == [0, 10, 11]
    assert "web1 on " + ns["DAY"] + ": 21 ok, 0 no data, 3 dropped" in out
    assert "11:00 UTC dropped: HEARTBEAT for history ~5.5" in out
