"""A local Spark standalone cluster from the installed PySpark, for trying the cluster path of
the history side on one machine (``fleetwatch history cluster start|stop|status``).

:func:`start` runs a master and N workers as the wheel ships them (its ``bin/spark-class``
with ``org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker``), each in a
process group of its own, bound to ``host`` (127.0.0.1) on ports the kernel picks; their
logs, pids and the master's URLs are kept in a directory (:data:`STATE`), so :func:`stop`
and :func:`status` from another process find them. It reads the master's URL and web UI
port from the master's log (Spark logs them at INFO: the daemons get Spark's default log4j
profile, into their log files), then waits until the master's ``/json`` lists every worker
ALIVE. No PySpark import: this only starts JVMs (``java`` as fleetwatch/lake/spark.py finds
it, through ``spark-class``).

A cluster started ``owned`` (the demo's) belongs to the process that started it: its
daemons get the parent-death signal (:mod:`fleetwatch.lifeline`: SIGTERM when that process
ends, even by SIGKILL), and :data:`STATE` names the owner (pid and start time), so a later
:func:`start` in the same directory finds a cluster whose owner is gone, stops it and says
so. A cluster started by ``fleetwatch history cluster start`` has no owner: it runs until
``stop``.

:func:`serve` starts a Spark Connect server alone, on a Spark of its own in local mode (the
demo's warm Spark: ``history sql`` answers in about a second instead of starting a JVM),
without waiting for it; :func:`connected` waits until it listens.

A cluster of one machine is for trying things: on a real cluster the lake must be on a path
every executor reads (docs/operating/history-cluster.md).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleetwatch.lifeline import die_with_parent
from fleetwatch.lake.spark import CODEGEN_CACHE, JavaMissing, java

log = logging.getLogger(__name__)

#: the state file in a cluster's directory
STATE = "cluster.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
MASTER_UI = re.compile(r"Bound MasterWebUI to \S+, and started at https?://[^:/\s]+:(\d+)")
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT_URL = re.compile(r"Spark Connect server started at: \S+?:(\d+)")
#: the daemons' own settings: no REST submission server (it binds the fixed port 6066)
DAEMON_CONF = {"spark.master.rest.enabled": "false"}


class ClusterError(RuntimeError):
    """The cluster could not be started or found; ``str()`` is the one line to show."""


@dataclass
class Cluster:
    """What :data:`STATE` records of a running cluster."""

    directory: str
    master: str = ""                      # spark://HOST:PORT
    ui: str = ""                          # http://HOST:PORT (the master's web UI)
    connect: str = ""                     # sc://HOST:PORT (a Spark Connect server), or ""
    pids: dict[str, int] = field(default_factory=dict)   # master, worker-1... -> pid
    owner: list[int] = field(default_factory=list)  # [pid, start time] of an owned cluster's owner

    @classmethod
    def load(cls, directory: str) -> "Cluster | None":
        try:
            with open(os.path.join(directory, STATE), encoding="utf-8") as f:
                return cls(**json.load(f))
        except FileNotFoundError:
            return None

    def save(self) -> None:
        path = os.path.join(self.directory, STATE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, indent=1)
        os.replace(path + ".tmp", path)

    def alive(self) -> dict[str, int]:
        """The recorded daemons still running (a recycled pid is not one of them)."""
        return {name: pid for name, pid in self.pids.items() if is_daemon(pid)}

    def orphaned(self) -> bool:
        """Whether the cluster was owned by a process that has ended (a recycled pid has
        another start time)."""
        return bool(self.owner) and started(self.owner[0]) != self.owner[1]


def started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(b")", 1)[1].split()[19])    # field 22, after "pid (comm)"


def spark_home() -> str:
    """The installed PySpark's directory (it holds bin/spark-class and jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError("the Spark cluster needs the Python package 'pyspark': "
                           "pip install 'fleetwatch[history]'")
    return list(spec.submodule_search_locations)[0]


def is_daemon(pid: int) -> bool:
    """Whether ``pid`` is a running Spark daemon (master, worker or Connect server: its
    class is on its command line, from the launcher script's start to the JVM it execs)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return b"org.apache.spark." in cmdline


def master_state(ui: str, timeout: float = 5.0) -> dict:
    """The master's ``/json`` (workers, applications), from its web UI."""
    with urllib.request.urlopen(f"{ui}/json/", timeout=timeout) as reply:
        return json.load(reply)


def start(directory: str, workers: int = 1, cores: int | None = None,
          memory: str = "2g", host: str = "127.0.0.1", connect: bool = False,
          owned: bool = False, say=lambda line: None, timeout: float = 120.0,
          clock=time.monotonic) -> Cluster:
    """Start a master and ``workers`` workers (``cores`` and ``memory`` each; cores by
    default the machine's shared out, at least 1) and wait until all are up; with
    ``connect`` a Spark Connect server too, whose application on the cluster takes half
    its cores (at least 1: the rest stays free for the history commands' own sessions).
    ``owned``: the daemons end with this process. A cluster left in ``directory`` by an
    owner that has ended is stopped first, told through ``say``."""
    if workers < 1:
        raise ClusterError("--workers: expected 1 or more")
    if cores is not None and cores < 1:
        raise ClusterError("--cores: expected 1 or more")
    if not re.fullmatch(r"[1-9]\d*[kmgt]?", memory, re.IGNORECASE):
        raise ClusterError(f"--memory: expected a size such as 2g or 1500m, not {memory!r}")
    directory = os.path.abspath(directory)
    home = _take(directory, say)
    os.makedirs(os.path.join(directory, "work"), exist_ok=True)
    conf = os.path.join(directory, "spark-defaults.conf")
    Path(conf).write_text("".join(f"{k} {v}\n" for k, v in DAEMON_CONF.items()))
    cores = cores or max(1, (os.cpu_count() or 1) // workers)
    cluster = Cluster(directory, owner=[os.getpid(), started(os.getpid())] if owned else [])
    procs: dict[str, subprocess.Popen] = {}   # this process's children: alive while poll() is None
    deadline = clock() + timeout
    try:
        master_log = os.path.join(directory, "master.log")
        procs["master"] = _daemon(home, directory, master_log, host, [
            MASTER_CLASS, "--host", host, "--port", "0", "--webui-port", "0",
            "--properties-file", conf], owned=owned)
        cluster.pids["master"] = procs["master"].pid
        cluster.save()
        url = _logged(master_log, MASTER_URL, procs["master"], "Spark master", deadline,
                      clock)
        port = _logged(master_log, MASTER_UI, procs["master"], "Spark master", deadline,
                       clock)
        cluster.master, cluster.ui = url, f"http://{host}:{port}"
        for i in range(1, workers + 1):
            name = f"worker-{i}"
            procs[name] = _daemon(home, directory, os.path.join(directory, f"{name}.log"),
                                  host, [
                WORKER_CLASS, "--host", host, "--port", "0", "--webui-port", "0",
                "--cores", str(cores), "--memory", memory,
                "--work-dir", os.path.join(directory, "work"),
                "--properties-file", conf, url], owned=owned)
            cluster.pids[name] = procs[name].pid
            cluster.save()
        _wait_workers(cluster, procs, workers, deadline, clock)
        if connect:
            procs["connect"] = _connect(home, directory, host, url, [
                "--conf", f"spark.cores.max={max(1, cores * workers // 2)}",
                "--conf", "spark.executor.memory=1g"], owned=owned)
            cluster.pids["connect"] = procs["connect"].pid
            cluster.save()
            cluster.connect = connected(cluster, procs["connect"], host, deadline, clock)
        cluster.save()
    except BaseException:
        for proc in procs.values():      # ours: killed by group whatever their command line
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        stop(directory)
        raise
    return cluster


def serve(directory: str, master: str = "local[2]", memory: str = "1g", port: int = 0,
          host: str = "127.0.0.1", owned: bool = False,
          say=lambda line: None) -> tuple[Cluster, subprocess.Popen]:
    """Start a Spark Connect server running its own Spark on ``master`` (local mode: no
    master or worker daemons), its driver ``memory``, listening on ``host``:``port`` (0: a
    port it picks, in its log), and return at once: the cluster as recorded in ``directory``
    (its ``connect`` URL known only with a ``port``) and the server's process, for
    :func:`connected`. ``owned`` and a server left by an ended owner: as :func:`start`."""
    directory = os.path.abspath(directory)
    home = _take(directory, say)
    os.makedirs(directory, exist_ok=True)
    cluster = Cluster(directory, owner=[os.getpid(), started(os.getpid())] if owned else [],
                      connect=f"sc://{host}:{port}" if port else "")
    proc = _connect(home, directory, host, master, ["--driver-memory", memory], port=port,
                    owned=owned)
    cluster.pids["connect"] = proc.pid
    cluster.save()
    return cluster, proc


def connected(cluster: Cluster, proc: subprocess.Popen, host: str = "127.0.0.1",
              deadline: float | None = None, clock=time.monotonic) -> str:
    """The ``sc://`` URL of the Spark Connect server ``proc`` once it listens (its log says
    so); ClusterError if it exits first or is not up by ``deadline`` (default 300 s on)."""
    deadline = clock() + 300.0 if deadline is None else deadline
    port = _logged(os.path.join(cluster.directory, "connect.log"), CONNECT_URL, proc,
                   "Spark Connect server", deadline, clock)
    return f"sc://{host}:{port}"


def _take(directory: str, say) -> str:
    """Before starting daemons in ``directory``: stop those an ended owner left there
    (saying so), refuse when others run; Spark's home (ClusterError without Java)."""
    old = Cluster.load(directory)
    if old and old.alive():
        if not old.orphaned():
            raise ClusterError(f"a cluster already runs from {directory} ("
                               f"{old.master or old.connect}): fleetwatch history cluster "
                               f"stop first")
        names = stop(directory)
        say(f"stopped the Spark cluster (pid {old.owner[0]}'s, which has ended) left "
            f"running in {directory}: {', '.join(names)}")
    home = spark_home()
    try:
        java()                      # spark-class without one fails with a bash error
    except JavaMissing as e:
        raise ClusterError(str(e)) from None
    return home


def _connect(home: str, directory: str, host: str, master: str, options: list[str],
             port: int = 0, owned: bool = False) -> subprocess.Popen:
    """A Spark Connect server on ``master``, bound to ``host``:``port``, logging into
    ``connect.log``."""
    return _daemon(home, directory, os.path.join(directory, "connect.log"), host, [
        CONNECT_CLASS, "--master", master, "--name", "fleetwatch Spark Connect", *options,
        "--conf", f"spark.connect.grpc.binding.address={host}",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", f"spark.driver.host={host}",
        "--conf", f"spark.driver.bindAddress={host}",
        "--conf", "=".join(CODEGEN_CACHE),
        "--conf", "spark.ui.enabled=false"], submit=True, owned=owned)


def _daemon(home: str, directory: str, log_path: str, host: str, argv: list[str],
            submit: bool = False, owned: bool = False) -> subprocess.Popen:
    """Start a daemon in a process group of its own: ``spark-class ARGV`` (the JVM execs in
    its place), or with ``submit`` ``spark-submit --class ARGV[0] ARGV[1:]``; ``owned``:
    SIGTERM to it when this process ends."""
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": host,
           "SPARK_LOG_DIR": directory}
    with open(log_path, "ab") as out:
        command = ([os.path.join(home, "bin", "spark-submit"), "--class", *argv] if submit
                   else [os.path.join(home, "bin", "spark-class"), *argv])
        proc = subprocess.Popen(command,
                                stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=directory,
                                start_new_session=True,   # its own group: stop() kills it
                                preexec_fn=die_with_parent() if owned else None)
    return proc


def _logged(log_path: str, pattern, proc, what: str, deadline: float, clock) -> str:
    """The first group of ``pattern`` once the daemon's log has it."""
    while clock() < deadline:
        text = Path(log_path).read_text(errors="replace")
        found = pattern.search(text)
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise ClusterError(f"the {what} exited at start: {_last_error(text)} "
                               f"(log: {log_path})")
        time.sleep(0.2)
    raise ClusterError(f"the {what} did not start in time (log: {log_path})")


def _wait_workers(cluster: Cluster, procs: dict, workers: int, deadline: float,
                  clock) -> None:
    alive = 0
    while clock() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                path = os.path.join(cluster.directory, f"{name}.log")
                raise ClusterError(f"the Spark {name} exited at start: "
                                   f"{_last_error(Path(path).read_text(errors='replace'))} "
                                   f"(log: {path})")
        try:
            alive = master_state(cluster.ui).get("aliveworkers", 0)
        except OSError as e:
            log.debug("master UI not answering yet: %s", e)
        if alive >= workers:
            return
        time.sleep(0.2)
    raise ClusterError(f"{alive} of {workers} Spark workers registered in time "
                       f"(logs in {cluster.directory})")


def _last_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "ERROR" in ln or "Exception" in ln]
    return (lines[-1] if lines else (text.strip().splitlines() or ["no output"])[-1])[:300]


def stop(directory: str, timeout: float = 30.0, clock=time.monotonic) -> list[str]:
    """Stop the cluster recorded in ``directory`` (SIGTERM to each daemon's process group,
    SIGKILL past ``timeout``); return the names stopped."""
    cluster = Cluster.load(os.path.abspath(directory))
    if cluster is None:
        return []
    alive = cluster.alive()
    for pid in alive.values():
        _signal_group(pid, signal.SIGTERM)
    deadline = clock() + timeout
    while clock() < deadline and any(is_daemon(pid) for pid in alive.values()):
        time.sleep(0.1)
    for pid in alive.values():
        if is_daemon(pid):
            _signal_group(pid, signal.SIGKILL)
    cluster.pids = {}
    cluster.save()
    return sorted(alive)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)          # the daemon leads its group (start_new_session)
    except ProcessLookupError:
        pass


def status(directory: str) -> dict:
    """What runs from ``directory``: master URL, UI, the daemons alive, and the master's
    view (workers ALIVE, applications running) when it answers."""
    cluster = Cluster.load(os.path.abspath(directory))
    if cluster is None or not cluster.alive():
        return {"running": False, "directory": os.path.abspath(directory)}
    out = {"running": True, "directory": cluster.directory, "master": cluster.master,
           "ui": cluster.ui, "connect": cluster.connect, "daemons": cluster.alive()}
    if not cluster.ui:              # a Connect server alone (serve): no master to ask
        return out
    try:
        state = master_state(cluster.ui)
        out["workers"] = state.get("aliveworkers", 0)
        out["cores"] = state.get("cores", 0)
        out["applications"] = [a.get("name", "") for a in state.get("activeapps", [])]
    except OSError as e:
        out["error"] = f"the master's UI does not answer: {e}"
    return out
