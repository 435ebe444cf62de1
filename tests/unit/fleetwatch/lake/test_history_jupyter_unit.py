"""The notebook directory of ``fleetwatch history notebook`` (fleetwatch/lake/jupyter.py),
without starting JupyterLab."""

from __future__ import annotations

from fleetwatch.config import load_section
from fleetwatch.lake import jupyter
from fleetwatch.lake.settings import HistorySettings


def test_the_notebook_directory_holds_the_settings_the_command_runs_with(tmp_path):
    settings = HistorySettings(lake="/srv/lake", master="spark://127.0.0.1:7077",
                               conf={"spark.cores.max": "1"}, remote="sc://127.0.0.1:15002")
    notebook = jupyter.prepare(str(tmp_path), settings)
    assert notebook == tmp_path / "fleet-history.ipynb"
    assert notebook.read_bytes() == jupyter.NOTEBOOK.read_bytes()
    # what the notebook's History.open(FLEETWATCH_HISTORY) reads back: the same settings
    assert load_section(HistorySettings, str(tmp_path / jupyter.SETTINGS), "history") \
        == settings


def test_an_edited_notebook_is_kept(tmp_path):
    notebook = jupyter.prepare(str(tmp_path), HistorySettings(lake="/a"))
    notebook.write_text('{"edited": true}')
    jupyter.prepare(str(tmp_path), HistorySettings(lake="/b"))
    assert notebook.read_text() == '{"edited": true}'
    assert '"lake": "/b"' in (tmp_path / jupyter.SETTINGS).read_text()
