"""notebooks/fleet-history.ipynb executed by a real Jupyter kernel (nbclient + ipykernel: the
kernel JupyterLab starts), and what it printed, for the notebook tests on local Spark, a
standalone cluster and Spark Connect.

:func:`execute` runs every cell in a fresh ``python3`` kernel of this interpreter with
``FLEETWATCH_HISTORY`` set (an operator config or a lake), in the notebook directory, and
returns the executed notebook; :func:`printed` is its cells' stdout, one string per code
cell; :func:`check` asserts what the generated lake (tests/support/lakegen.py) must print.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "fleet-history.ipynb"


def execute(history: str, cwd: Path, timeout: float = 600.0):
    """The notebook executed with ``FLEETWATCH_HISTORY=history`` (an error in a cell raises
    nbclient's CellExecutionError naming the cell and the traceback)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel", reason="the notebook extra is not installed")
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    old = os.environ.get("FLEETWATCH_HISTORY")
    os.environ["FLEETWATCH_HISTORY"] = history          # the kernel inherits it
    try:
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                         resources={"metadata": {"path": str(cwd)}})
        client.execute()
    finally:
        if old is None:
            os.environ.pop("FLEETWATCH_HISTORY", None)
        else:
            os.environ["FLEETWATCH_HISTORY"] = old
    return nb


def code_cells() -> list[str]:
    """The notebook's code cells' sources."""
    import json
    nb = json.loads(NOTEBOOK.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def printed(nb) -> list[str]:
    """Each code cell's stdout."""
    return ["".join(o.get("text", "") for o in cell.get("outputs", [])
                    if o.get("output_type") == "stream" and o.get("name") == "stdout")
            for cell in nb.cells if cell.cell_type == "code"]


def images(nb) -> int:
    """How many plots the kernel sent (PNG display data)."""
    return sum(1 for cell in nb.cells if cell.cell_type == "code"
               for o in cell.get("outputs", []) if "image/png" in o.get("data", {}))


def check(nb, lake) -> None:
    """What the notebook prints on the generated lake ``lake`` (its known answers)."""
    from datetime import datetime, timezone
    text = "".join(printed(nb))
    errors = [o for cell in nb.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    day = datetime.fromtimestamp(lake.base, timezone.utc).strftime("%Y-%m-%d")
    assert f"lake {lake.path}: Spark 4." in text
    assert "metrics                  57 rows" in text and "cpu.user on web1" in text
    assert f"web1 on {day}: 21 ok, 0 no data, 3 dropped" in text
    assert "11:00 UTC dropped: HEARTBEAT for history ~5.5" in text
