"""``fleetwatch history ...`` as a user runs it in a shell: what stderr says (no Spark banner,
"starting a local Spark" on a terminal, and at once when the configured Spark Connect server
does not answer; landing lines not compacted yet) and one line when Java is missing."""

from __future__ import annotations

import os
import pty
import signal
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(120)

from support.fleet import wait_for  # noqa: E402
from support.sandbox import path_without  # noqa: E402
from fleetwatch.cli.demo.ports import free_port  # noqa: E402
from fleetwatch.lake.synth import write_files  # noqa: E402

#: what Spark and its JVM print on stderr at start unless quieted
BANNER = ("WARN", "log4j", "Setting default log level", "To adjust logging level",
          "incubator")


def operator_config(tmp_path: Path) -> tuple[Path, Path]:
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {lake}\n"
                      f"  master: local[1]\n  conf:\n    spark.driver.memory: 512m\n")
    return config, lake


def fleetwatch(*args: str, env: dict | None = None, timeout: float = 90.0):
    return subprocess.run([sys.executable, "-m", "fleetwatch", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def on_a_terminal(*args: str, timeout: float = 90.0) -> tuple[int, str, str]:
    """Run ``fleetwatch ARGS`` with stderr on a pseudo-terminal: (status, stdout, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", *args],
                            stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    err = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:         # EIO: the process and its children closed the terminal
                break
            if not chunk:
                break
            err += chunk
        out = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out.decode(), err.decode(errors="replace")


# ---------------------------------------------------------------- Spark's noise

def test_sql_prints_no_spark_banner(tmp_path):
    config, _ = operator_config(tmp_path)
    res = fleetwatch("history", "sql", "--config", str(config),
                     "SELECT count(*) AS n FROM metrics")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["N", "0"]
    assert res.stderr == ""         # not a terminal: no "starting a local Spark", no banner


def test_sql_on_a_terminal_says_it_starts_spark_and_what_is_not_compacted(tmp_path):
    """Before the first compaction the tables are empty though the landing area holds
    lines: the user is told how many and how to compact them."""
    config, lake = operator_config(tmp_path)
    write_files(str(lake / "landing"), 120, files=2, hosts=3)
    (lake / "landing" / "x-history-0a.jsonl.open").write_text('{"a":1}\n{"b":2}\n')
    status, out, err = on_a_terminal("history", "sql", "--config", str(config),
                                     "SELECT count(*) AS n FROM metrics")
    assert status == 0, err
    assert out.split() == ["N", "0"]
    assert "fleetwatch history sql: starting a local Spark on local[1] (10-60 s)\r\n" in err
    assert not [line for line in err.splitlines() if any(b in line for b in BANNER)], err
    assert (f"fleetwatch history sql: nothing compacted yet: the landing area holds 122 lines "
            f"not in the tables (fleetwatch history compact --config {config})") in err


def first_line(proc: subprocess.Popen, deadline: float) -> str:
    """The first line ``proc`` writes on its stderr, before ``deadline`` (monotonic)."""
    line = b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
        chunk = os.read(proc.stderr.fileno(), 4096) if ready else b""
        if ready and not chunk:
            break
        line += chunk
    return line.decode(errors="replace").split("\n")[0]


def test_a_connect_server_not_up_yet_is_said_at_once_then_spark_starts_here(tmp_path):
    """history.remote set (the demo's warm Spark) but nothing answers there yet: one line
    on stderr at once, not a terminal though it is, then a Spark of the command's own (its
    JVM starts; the command is killed then, not waited for: 3-5 s of this test)."""
    config, _ = operator_config(tmp_path)
    url = f"sc://127.0.0.1:{free_port()}"           # nothing listens there
    config.write_text(config.read_text() + f"  remote: {url}\n")
    import psutil
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "history", "sql", "--config",
                             str(config), "SELECT 1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        line = first_line(proc, began + 20)
        took = time.monotonic() - began
        assert line == (f"fleetwatch history sql: starting a local Spark on local[1] (10-60 s): "
                        f"no Spark Connect server answers at {url}: Connection refused "
                        f"(history.remote in {config}; it answers in seconds once up)")
        # about a second on an idle machine (Python's start and the CLI's imports): the claim
        # is its order, before Spark's JVM, not a stopwatch
        print(f"the line after {took:.1f} s")
        assert not [c for c in psutil.Process(proc.pid).children(recursive=True)
                    if c.name() == "java"], "the line came after Spark started"
        wait_for(lambda: [c for c in psutil.Process(proc.pid).children(recursive=True)
                          if c.name() == "java"], 30, 0.1, "the command's own Spark JVM")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ---------------------------------------------------------------- Java

def without_java(tmp_path: Path) -> dict:
    """An environment whose PATH has every program of /usr/bin but java, JAVA_HOME unset."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = path_without(tmp_path / "bin", "java")
    return env


@pytest.mark.parametrize("command", [
    ["sql", "SELECT 1"],
    ["compact"],
    ["compact", "--every", "60"],       # the demo's compaction
    ["expire", "--older-than", "400d", "--dry-run"],
    ["replay", "--to", "graphite", "--dry-run"],
])
def test_every_history_command_without_java_says_so_in_one_line(tmp_path, command):
    config, _ = operator_config(tmp_path)
    res = fleetwatch("history", command[0], "--config", str(config), *command[1:],
                     env=without_java(tmp_path), timeout=30)
    assert res.returncode == 69, res.stderr
    assert res.stderr.splitlines() == [
        "fleetwatch history: Java 17 or 21 is needed for the history side (no java on the "
        "PATH, JAVA_HOME not set): apt-get install openjdk-17-jre-headless"]


def test_a_java_home_without_java_is_named(tmp_path):
    config, _ = operator_config(tmp_path)
    env = {**without_java(tmp_path), "JAVA_HOME": str(tmp_path / "jdk")}
    res = fleetwatch("history", "sql", "--config", str(config), "SELECT 1", env=env, timeout=30)
    assert res.returncode == 69
    assert res.stderr.splitlines() == [
        f"fleetwatch history: Java 17 or 21 is needed for the history side (JAVA_HOME="
        f"{tmp_path / 'jdk'} has no bin/java): apt-get install openjdk-17-jre-headless"]
