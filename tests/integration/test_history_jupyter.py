"""``fleetwatch history notebook`` serving JupyterLab on 127.0.0.1, its page opened in headless
Chromium (tests/support/browser.py). The fleet notebook executed by a real kernel (nbclient
+ ipykernel) on local Spark, on a standalone cluster and through Spark Connect, its outputs
checked and compared: test_history_cluster.py (one kernel run on local Spark for the
module's comparisons)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytest.importorskip("jupyterlab", reason="the notebook extra is not installed")

ROOT = Path(__file__).resolve().parents[2]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.timeout(240)
def test_history_notebook_serves_jupyterlab_on_loopback(history_lake, tmp_path):
    """``fleetwatch history notebook`` prints a URL on 127.0.0.1 with a token; Chromium opens
    the fleet notebook there; SIGTERM stops JupyterLab and its kernels (exit 0)."""
    from support.browser import browser, screenshot
    from support.fleet import wait_for
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {history_lake.path}\n"
                      f"  master: local[1]\n")
    out = tmp_path / "notebook.out"
    directory = tmp_path / "nb"
    lab_pid = 0
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "history", "notebook",
                                 "--config", str(config), "--dir", str(directory)],
                                stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)
    try:
        wait_for(lambda: "token=" in out.read_text() or proc.poll() is not None, 90, 0.2,
                 "the JupyterLab URL")
        text = out.read_text()
        assert proc.poll() is None, text
        lab = next((directory / ".jupyter-runtime").glob("jpserver-*.json"))
        lab_pid = int(lab.stem.split("-")[1])       # JupyterLab, in a process group of its own
        url = next(w for w in text.split() if w.startswith("http://"))
        assert url.startswith("http://127.0.0.1:") and "/lab/tree/fleet-history.ipynb?token=" \
            in url, text
        assert f"lake {history_lake.path}" in text
        assert (directory / "fleet-history.ipynb").is_file()
        assert f'"lake": "{history_lake.path}"' in (directory / "history.yaml").read_text()
        with browser() as driver:
            driver.get(url)
            # JupyterLab renders the notebook's first markdown cell once the app has loaded
            wait_for(lambda: "Fleet history" in driver.find_element("tag name", "body").text,
                     60, 0.5, "the notebook in JupyterLab")
            assert driver.title.startswith("fleet-histor") and \
                driver.title.endswith(" - JupyterLab"), driver.title
            screenshot(driver, "history-notebook-jupyterlab")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if lab_pid and group_alive(lab_pid):      # the command was killed: stop what it ran
            os.killpg(lab_pid, signal.SIGTERM)
    # JupyterLab ran in its own group, its kernels too: gone
    wait_for(lambda: not group_alive(lab_pid), 20, 0.2, "JupyterLab's process group to end")
