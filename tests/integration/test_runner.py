"""The agent's plugin runner: config, path resolution, run logic, and real plugin processes.

Logic tests feed :class:`agent.runner.Runner` RUN messages with a fake launcher and clock.
Process tests run real scripts and Debian's plugins through :func:`agent.execute.execute`
and the worker threads, as the agent does, without sockets.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agent.declared import Declared, Plugin, Refused
from agent.execute import Finished, Launch, Workers, execute
from agent.plugins_config import CheckConfig, PluginsConfig
from agent.runner import RESULT_BUDGET, Runner, outcome, resolve
from support.clock import Clock
from support.fleet import wait_for
from fleetwatch import config, protocol

DEBIAN = "/usr/lib/nagios/plugins"
needs_debian = pytest.mark.skipif(not os.path.isdir(DEBIAN),
                                  reason="monitoring-plugins-basic not installed")


def script(directory: Path, name: str, body: str, mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(mode)
    return path


def run_msg(command_id: str, plugin: str, **extra) -> protocol.Message:
    return protocol.make("RUN", "sched-1", command_id=command_id, plugin=plugin, **extra)


def cfg(dirs, checks=(), **extra) -> PluginsConfig:
    return PluginsConfig(dirs=[str(d) for d in dirs], checks=list(checks), **extra)


def check(name, command, *args, interval=60.0, timeout=10.0) -> CheckConfig:
    return CheckConfig(name, command, list(args), interval, timeout)


# ---------------------------------------------------------------- config

@pytest.mark.parametrize("plugins,key", [
    ({"bogus": 1}, "plugins.bogus"),
    ({"dirs": ["relative/dir"]}, "plugins.dirs"),
    ({"dirs": []}, "plugins.dirs"),
    ({"max_running": 0}, "plugins.max_running"),
    ({"output_limit": 10}, "plugins.output_limit"),
    ({"checks": [{"name": "a", "command": "x", "colour": 1}]}, "plugins.checks[0].colour"),
    ({"checks": [{"name": "bad name", "command": "x"}]}, "plugins.checks[0].name"),
    ({"checks": [{"name": "-a", "command": "x"}]}, "plugins.checks[0].name"),
    ({"checks": [{"name": "a"}]}, "plugins.checks[0].command"),
    ({"checks": [{"name": "a", "command": "/bin/sh"}]}, "plugins.checks[0].command"),
    ({"checks": [{"name": "a", "command": "../x"}]}, "plugins.checks[0].command"),
    ({"checks": [{"name": "a", "command": "x", "args": "-w 1"}]}, "plugins.checks[0].args"),
    ({"checks": [{"name": "a", "command": "x", "args": [1]}]}, "plugins.checks[0].args[0]"),
    ({"checks": [{"name": "a", "command": "x", "interval": 0}]},
     "plugins.checks[0].interval"),
    ({"checks": [{"name": "a", "command": "x", "timeout": -1}]}, "plugins.checks[0].timeout"),
    ({"checks": [{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]},
     "plugins.checks"),
])
def test_plugins_config_is_strict(tmp_path, plugins, key):
    from agent.config import AgentConfig
    path = tmp_path / "agent.yaml"
    import yaml
    path.write_text(yaml.safe_dump({"routers": ["tcp://127.0.0.1:1"], "plugins": plugins}))
    with pytest.raises(config.ConfigError) as e:
        config.load(AgentConfig, str(path))
    assert e.value.key == key, str(e.value)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_plugins_config_defaults_and_a_check(tmp_path):
    from agent.config import AgentConfig
    from plugins import bundled_dir
    path = tmp_path / "agent.yaml"
    path.write_text("routers: [tcp://127.0.0.1:1]\nplugins:\n  checks:\n"
                    "    - {name: load, command: check_load, args: [-w, '1,1,1'], interval: 30}\n")
    got = config.load(AgentConfig, str(path)).plugins
    assert got.dirs == [bundled_dir(), DEBIAN] and got.max_running == 4
    assert got.checks[0].wire() == {"name": "load", "interval": 30.0, "timeout": 10.0}


# ---------------------------------------------------------------- resolution

def test_resolve_inside_the_plugin_dirs_only(tmp_path):
    a, b, outside = tmp_path / "a", tmp_path / "b", tmp_path / "outside"
    script(a, "check_a", "exit 0\n")
    script(b, "check_b", "exit 0\n")
    script(b, "check_a", "exit 1\n")                      # shadowed by a/check_a
    script(outside, "evil", "exit 0\n")
    script(a, "plain", "exit 0\n", mode=0o644)
    (a / "subdir").mkdir()
    script(a / "subdir", "check_sub", "exit 0\n")
    (a / "escape").symlink_to(outside / "evil")
    (a / "inside").symlink_to(b / "check_b")               # into another plugin dir: fine
    (a / "dir").mkdir()
    dirs = [str(a), str(b)]

    assert resolve("check_a", dirs) == (str(a / "check_a"), str(a / "check_a"))
    assert resolve("check_b", dirs)[0] == str(b / "check_b")
    assert resolve("subdir/check_sub", dirs)[0] == str(a / "subdir" / "check_sub")
    assert resolve("inside", dirs) == (str(b / "check_b"), str(a / "inside"))
    assert "outside the plugin directories" in resolve("escape", dirs)
    assert "(..)" in resolve("../outside/evil", dirs)
    assert "(..)" in resolve("subdir/../../outside/evil", dirs)
    assert "absolute" in resolve(str(outside / "evil"), dirs)
    assert "not executable" in resolve("plain", dirs)
    assert "not a regular file" in resolve("dir", dirs)
    assert "not found" in resolve("nothing", dirs)


# ---------------------------------------------------------------- runner logic

@pytest.fixture
def plugin_dir(tmp_path):
    d = tmp_path / "plugins"
    script(d, "check_ok", "echo 'OK - fine | x=1'\n")
    return d


def make_runner(plugin_dir, checks=None, clock=None, **extra):
    checks = checks if checks is not None else [check("ok", "check_ok")]
    calls = []

    def launcher(launch, stop):
        calls.append(launch)
        return Finished(0, b"OK - fine | x=1;2;3\n", started=5.0, duration=0.25)

    clock = clock or Clock(1000.0)
    runner = Runner("agent-1", Declared(checks), cfg([plugin_dir], **cfg_extra(extra)),
                    launcher=launcher,
                    clock=clock, wall=clock, **{k: v for k, v in extra.items()
                                                if k.startswith("cache")})
    return runner, calls


def cfg_extra(extra):
    return {k: v for k, v in extra.items() if not k.startswith("cache")}


def drive(runner):
    """Run every job the runner lets start, as the workers would; the answers."""
    answers = []
    while True:
        jobs = runner.take()
        if not jobs:
            return answers
        for job in jobs:
            answers += runner.finish(job, runner.work(job))


def test_declared_plugin_runs_and_result_echoes_slot(plugin_dir):
    runner, calls = make_runner(plugin_dir)
    assert runner.submit(run_msg("c1", "ok", slot=1700000000, timeout=3), "r1") == []
    [(origin, msg)] = drive(runner)
    assert origin == "r1" and msg.type == "RESULT"
    assert msg.body["command_id"] == "c1" and msg.body["plugin"] == "ok"
    assert msg.body["status"] == 0 and msg.body["output"] == "OK - fine"
    assert msg.body["perfdata"] == [{"label": "x", "value": 1.0, "uom": "", "warn": "2",
                                     "crit": "3", "min": None, "max": None}]
    assert msg.body["slot"] == 1700000000 and msg.body["started"] == 5.0
    assert msg.body["duration"] == 0.25
    assert calls[0].timeout == 3 and calls[0].argv0.endswith("check_ok")
    assert runner.counters["agent.runs.started"] == 1 and runner.counters["agent.runs.ok"] == 1
    protocol.decode(protocol.encode(msg))


def test_a_runner_restored_from_a_vm_snapshot_numbers_its_results_anew(plugin_dir):
    """Issue 31, 2: results are ordered by the agent's boot and seq, which live in its
    memory. A process restored from a VM snapshot goes on from the seq it had then, numbers
    it already sent: the sinks held them "not newer" until it passed the last one. Its wall
    clock, set right on resume, moved against its monotonic one (restored with it): a new
    boot, so the sinks order by arrival and hide nothing. A step back of the wall clock
    alone (NTP) does the same; the slewing of a few seconds a day does not."""
    import copy

    from sinks.alerting.checks.ordering import newer, of
    wall, mono = Clock(1_700_000_000.0), Clock(500.0)
    runner, _ = make_runner(plugin_dir)
    runner.clock, runner.wall, runner._offset = mono, wall, wall() - mono()

    def result(n: int, runner=runner) -> dict:
        assert runner.submit(run_msg(f"c{n}", "ok"), "r1") == []
        [(_, msg)] = drive(runner)
        return msg.body

    first = result(1)
    # the snapshot: its memory and its monotonic clock as they are now; the wall clock is
    # the real one, set right when it resumes
    snapshot = copy.deepcopy(runner, {id(wall): wall})
    for n in range(2, 6):
        wall.advance(60)
        mono.advance(60)
        held = result(n)
    assert (held["boot"], held["seq"]) == (first["boot"], 5)
    wall.advance(3600)                          # resumed an hour later, the clock set right
    restored = result(6, snapshot)
    assert restored["boot"] != first["boot"] and restored["seq"] == 1
    assert newer(of(restored["ts"], wall(), restored["boot"], restored["seq"]),
                 of(held["ts"], wall() - 3600, held["boot"], held["seq"]))
    snapshot.clock.advance(60)
    wall.advance(61.5)                          # slewed: the same run
    again = result(7, snapshot)
    assert (again["boot"], again["seq"]) == (restored["boot"], 2)
    wall.advance(-7200)                         # stepped back: a new one
    assert result(8, snapshot)["boot"] not in (first["boot"], restored["boot"])


def test_run_timeout_only_shortens_the_declared_one(plugin_dir):
    runner, calls = make_runner(plugin_dir, [check("ok", "check_ok", timeout=5)])
    runner.submit(run_msg("c1", "ok", timeout=500), "r1")
    runner.submit(run_msg("c2", "ok", timeout=0), "r1")
    drive(runner)
    assert [c.timeout for c in calls] == [5, 5]


def test_undeclared_plugin_is_unknown_counted_and_never_runs(plugin_dir):
    runner, calls = make_runner(plugin_dir)
    [(_, msg)] = runner.submit(run_msg("c1", "check_ok"), "r1")
    assert msg.body["status"] == 3 and "not declared" in msg.body["output"]
    assert calls == [] and runner.take() == []
    assert runner.counters["agent.runs.undeclared"] == 1
    assert runner.counters["agent.runs.unknown"] == 1


def test_unresolvable_command_is_unknown_with_the_reason(plugin_dir, tmp_path):
    outside = script(tmp_path / "outside", "evil", "exit 0\n")
    (plugin_dir / "escape").symlink_to(outside)
    runner, calls = make_runner(plugin_dir, [check("esc", "escape"), check("gone", "check_gone")])
    [(_, msg)] = runner.submit(run_msg("c1", "esc"), "r1")
    assert "outside the plugin directories" in msg.body["output"]
    [(_, msg)] = runner.submit(run_msg("c2", "gone"), "r1")
    assert "not found" in msg.body["output"] and msg.body["status"] == 3
    assert calls == [] and runner.counters["agent.runs.refused"] == 2


def test_duplicate_command_id_runs_once(plugin_dir):
    runner, calls = make_runner(plugin_dir)
    assert runner.submit(run_msg("c1", "ok"), "r1") == []
    assert runner.submit(run_msg("c1", "ok"), "r2") == []      # in flight: answered later
    answers = drive(runner)
    assert [o for o, _ in answers] == ["r1", "r2"]
    first, again = answers[0][1], answers[1][1]
    assert again.msg_id == first.msg_id and again.body["dup"] and again.body["retry"] == 1
    [(origin, third)] = runner.submit(run_msg("c1", "ok"), "r3")  # done: answered at once
    assert origin == "r3" and third.msg_id == first.msg_id and third.body["retry"] == 2
    assert len(calls) == 1 and runner.counters["agent.runs.duplicates"] == 2
    [(_, refused)] = runner.submit(run_msg("c2", "nope"), "r1")
    [(_, again)] = runner.submit(run_msg("c2", "nope"), "r1")
    assert again.msg_id == refused.msg_id


def test_at_most_max_running_then_a_bounded_queue_then_busy(plugin_dir):
    runner, calls = make_runner(plugin_dir, max_running=2, max_queued=1)
    for i in range(3):
        assert runner.submit(run_msg(f"c{i}", "ok"), "r1") == []
    [(_, busy)] = runner.submit(run_msg("c3", "ok"), "r1")
    assert busy.body["status"] == 3 and "agent busy" in busy.body["output"]
    assert runner.counters["agent.runs.busy"] == 1
    jobs = runner.take()
    assert len(jobs) == 2 and runner.take() == []             # the third waits
    assert runner.gauges()["agent.runs.running"] == 2
    assert runner.gauges()["agent.runs.queued"] == 1
    runner.finish(jobs[0], runner.work(jobs[0]))
    [third] = runner.take()
    assert third.command_id == "c2"
    assert runner.submit(run_msg("c4", "ok"), "r1") == []      # room again


def test_command_id_cache_is_bounded_by_count_and_age(plugin_dir):
    clock = Clock(1000.0)
    runner, calls = make_runner(plugin_dir, clock=clock, cache_size=3, cache_age=60.0)
    for i in range(5):
        runner.submit(run_msg(f"c{i}", "ok"), "r1")
        drive(runner)
    assert list(runner.cache) == ["c2", "c3", "c4"]
    assert runner.submit(run_msg("c0", "ok"), "r1") == []      # forgotten: runs again
    drive(runner)
    clock.now += 61
    runner.submit(run_msg("c9", "ok"), "r1")
    assert "c3" not in runner.cache and "c0" not in runner.cache


def test_malformed_command_id_is_dropped_and_counted(plugin_dir):
    runner, calls = make_runner(plugin_dir)
    assert runner.submit(run_msg("not an id!", "ok"), "r1") == []
    assert runner.counters["agent.runs.malformed"] == 1 and runner.take() == []


def test_worker_failure_still_answers(plugin_dir):
    runner, _ = make_runner(plugin_dir)
    runner.submit(run_msg("c1", "ok"), "r1")
    [job] = runner.take()
    [(_, msg)] = runner.finish(job, RuntimeError("boom"))
    assert msg.body["status"] == 3 and "boom" in msg.body["output"]


# ---------------------------------------------------------------- outcome

LAUNCH = Launch("/p/check_x", "/p/check_x", (), 2.5)


@pytest.mark.parametrize("done,status,output", [
    (Finished(0, b"OK - a|x=1\n"), 0, "OK - a"),
    (Finished(1, b"WARN - b\n"), 1, "WARN - b"),
    (Finished(2, b"CRIT - c\n"), 2, "CRIT - c"),
    (Finished(3, b"UNKNOWN - d\n"), 3, "UNKNOWN - d"),
    (Finished(7, b"weird\n"), 3, "UNKNOWN - x: plugin exited with status 7 (expected 0 to 3): "
                                 "weird"),
    (Finished(-9, b""), 3, "UNKNOWN - x: plugin killed by signal 9 (SIGKILL)"),
    (Finished(-15, b"partial\n", timed_out=True), 3,
     "UNKNOWN - x: plugin timed out after 2.5s (process group killed): partial"),
    (Finished(None, error="Exec format error"), 3,
     "UNKNOWN - x: cannot run /p/check_x: Exec format error"),
    (Finished(0, b"", b"Traceback (most recent call last):\n  boom\n"), 0,
     "(No output on stdout) stderr: Traceback (most recent call last):"),
    (Finished(0, b""), 0, "(No output on stdout)"),
])
def test_outcome_statuses(done, status, output):
    got = outcome("x", LAUNCH, done)
    assert (got.status, got.output) == (status, output)
    if status == 3 and done.returncode != 3:
        assert got.perfdata == []


def test_outcome_keeps_stderr_when_it_explains_and_notes_truncation():
    got = outcome("x", LAUNCH, Finished(0, b"", b"line 1\nline 2\n"))
    assert got.long_output == "line 2"
    got = outcome("x", LAUNCH, Finished(9, b"OK\n", b"segfault soon\n", stdout_dropped=100))
    assert got.long_output == "segfault soon\n[100 more bytes of stdout discarded]"


def test_outcome_always_fits_a_result():
    huge = ("\u00e9" * 60000 + "\n") * 20                      # 6 octets each in JSON
    perf = " ".join(f"'{'l' * 190}{i}'=1" for i in range(256))
    got = outcome("x", LAUNCH, Finished(0, ("OK\n" + huge + "|" + perf).encode()))
    body = protocol.encode_body(protocol.make(
        "RESULT", "a", command_id="c", plugin="x", status=got.status, output=got.output,
        long_output=got.long_output, perfdata=got.perfdata))
    assert len(body) < protocol.MAX_BODY and len(body) <= RESULT_BUDGET + 1000


# ---------------------------------------------------------------- real processes

def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (this machine's init does not reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def launch(path: Path, *args, timeout=5.0, limit=65536, grace=0.3) -> Launch:
    return Launch(str(path), str(path), tuple(args), timeout, limit, grace)


@pytest.mark.parametrize("code", [0, 1, 2, 3, 7])
def test_exit_codes(tmp_path, code):
    path = script(tmp_path, "check_exit", f"echo 'STATUS {code} | v={code}'\nexit {code}\n")
    done = execute(launch(path))
    assert done.returncode == code and not done.timed_out
    got = outcome("e", launch(path), done)
    assert got.status == min(code, 3) if code <= 3 else got.status == 3
    assert ("status 7" in got.output) == (code == 7)


def test_timeout_kills_the_plugin_and_every_child(tmp_path):
    pids = tmp_path / "pids"
    path = script(tmp_path, "check_forks", f"""
sleep 300 & echo $! >> {pids}
sh -c 'sleep 300 & echo $! >> {pids}; trap "" TERM; sleep 300' &
echo $! >> {pids}
echo 'still working'
trap '' TERM
sleep 300
""")
    start = time.monotonic()
    done = execute(launch(path, timeout=1.0, grace=0.3))
    assert done.timed_out and time.monotonic() - start < 4
    assert done.stdout == b"still working\n"
    got = outcome("forks", launch(path, timeout=1.0), done)
    assert got.status == 3 and "timed out after 1s" in got.output
    listed = [int(p) for p in pids.read_text().split()]
    assert len(listed) == 3
    wait_for(lambda: all(gone(p) for p in listed), 5, what="the plugin's children gone")


def test_children_left_behind_by_a_plugin_that_exits_are_killed(tmp_path):
    pids = tmp_path / "pids"
    path = script(tmp_path, "check_leaves",
                  f"sleep 300 > /dev/null 2>&1 & echo $! > {pids}\necho OK\n")
    start = time.monotonic()
    done = execute(launch(path, timeout=10))
    assert done.returncode == 0 and time.monotonic() - start < 2
    wait_for(lambda: gone(int(pids.read_text())), 5, what="the left-behind child gone")


def test_a_child_holding_stdout_does_not_hold_the_result(tmp_path):
    path = script(tmp_path, "check_holds", "sleep 300 &\necho OK\n")
    start = time.monotonic()
    done = execute(launch(path, timeout=10))
    assert done.returncode == 0 and done.stdout == b"OK\n" and not done.timed_out
    assert time.monotonic() - start < 2


def test_output_is_capped_and_drained(tmp_path):
    path = script(tmp_path, "check_chatty",
                  "head -c 10000000 /dev/zero | tr '\\0' x\necho\nhead -c 3000000 /dev/zero >&2\n"
                  "exit 1\n")
    start = time.monotonic()
    done = execute(launch(path, limit=1000))
    assert time.monotonic() - start < 5
    assert done.returncode == 1 and len(done.stdout) == 1000 and len(done.stderr) == 1000
    assert done.stdout_dropped == 10_000_001 - 1000 and done.stderr_dropped == 3_000_000 - 1000
    got = outcome("chatty", launch(path), done)
    assert got.status == 1 and "bytes of stdout discarded" in got.long_output


def test_signal_and_exec_failure(tmp_path):
    path = script(tmp_path, "check_dies", "echo dying\nkill -SEGV $$\n")
    got = outcome("dies", launch(path), execute(launch(path)))
    assert got.status == 3 and "signal 11 (SIGSEGV)" in got.output
    bad = tmp_path / "check_bad"
    bad.write_text("#!/nonexistent/interpreter\n")
    bad.chmod(0o755)
    got = outcome("bad", launch(bad), execute(launch(bad)))
    assert got.status == 3 and "cannot run" in got.output


def test_no_shell_runs_the_arguments(tmp_path):
    marker = tmp_path / "marker"
    path = script(tmp_path, "check_args", 'printf "%s|" "$@"\n')
    done = execute(launch(path, f"; touch {marker}", "$(touch x)", "a b"))
    assert done.stdout == f"; touch {marker}|$(touch x)|a b|".encode()
    assert not marker.exists()


# ---------------------------------------------------------------- runner + workers

class Harness:
    """The agent's plugin machinery without sockets: runner, worker threads, wake-up."""

    def __init__(self, dirs, checks, **extra):
        self.runner = Runner("agent-1", Declared(checks), cfg(dirs, checks, **extra))
        self.workers = Workers(self.runner.cfg.max_running, self.runner.work)
        self.workers.start()
        self.answers: list = []

    def submit(self, command_id, plugin, origin="r1", **extra):
        self.answers += self.runner.submit(run_msg(command_id, plugin, **extra), origin)
        self._start()

    def _start(self):
        for job in self.runner.take():
            self.workers.submit(job)

    def pump(self):
        for job, result in self.workers.finished():
            self.answers += self.runner.finish(job, result)
        self._start()
        return self.answers

    def result(self, command_id, timeout=15.0) -> protocol.Message:
        return wait_for(lambda: next((m for _, m in self.pump()
                                      if m.body["command_id"] == command_id), None),
                        timeout, what=f"RESULT {command_id}")

    def close(self):
        self.workers.close()


@pytest.fixture
def harness():
    made = []

    def make(dirs, checks, **extra):
        h = Harness(dirs, checks, **extra)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_duplicate_command_id_ran_once_through_the_workers(tmp_path, harness):
    runs = tmp_path / "runs"
    d = tmp_path / "plugins"
    script(d, "check_count", f"echo run >> {runs}\nsleep 0.3\necho 'OK - counted'\n")
    h = harness([d], [check("count", "check_count")])
    h.submit("dup-1", "count", "r1")
    h.submit("dup-1", "count", "r2")
    first = h.result("dup-1")
    wait_for(lambda: len(h.pump()) == 2, 5, what="the second answer")
    h.submit("dup-1", "count", "r3")
    assert len(h.answers) == 3
    assert {m.msg_id for _, m in h.answers} == {first.msg_id}
    assert [o for o, _ in h.answers] == ["r1", "r2", "r3"]
    assert runs.read_text() == "run\n"


def test_max_running_holds_through_the_workers(tmp_path, harness):
    d = tmp_path / "plugins"
    log = tmp_path / "log"
    script(d, "check_slow", f"echo start >> {log}\nsleep 0.4\necho end >> {log}\necho OK\n")
    h = harness([d], [check("slow", "check_slow")], max_running=2, max_queued=10)
    for i in range(4):
        h.submit(f"s{i}", "slow")
    for i in range(4):
        assert h.result(f"s{i}").body["status"] == 0
    running = peak = 0
    for line in log.read_text().split():
        running += 1 if line == "start" else -1
        peak = max(peak, running)
    assert peak == 2


def test_path_escapes_answered_through_the_workers(tmp_path, harness):
    d, outside = tmp_path / "plugins", tmp_path / "outside"
    evil = script(outside, "evil", f"touch {tmp_path / 'ran'}\necho OK\n")
    (d).mkdir()
    (d / "link").symlink_to(evil)
    h = harness([d], [check("link", "link")])
    h.submit("e1", "link")
    msg = h.result("e1")
    assert msg.body["status"] == 3 and "outside the plugin directories" in msg.body["output"]
    assert not (tmp_path / "ran").exists()


@needs_debian
def test_debian_plugins_through_the_runner(harness):
    checks = [check(f"dummy{i}", "check_dummy", str(i), f"dummy {i}") for i in range(4)]
    checks += [check("load", "check_load", "-w", "500,400,300", "-c", "1000,800,600"),
               check("dummy7", "check_dummy", "7")]
    h = harness([DEBIAN], checks)
    for c in checks:
        h.submit(f"d-{c.name}", c.name, slot=1.7e9)
    for i in range(4):
        body = h.result(f"d-dummy{i}").body
        assert body["status"] == i and body["output"].endswith(f": dummy {i}")
        assert body["slot"] == 1.7e9 and body["duration"] >= 0 and body["started"] > 1.6e9
    body = h.result("d-load").body
    assert body["status"] == 0 and body["output"].startswith("LOAD OK")
    assert [p["label"] for p in body["perfdata"]] == ["load1", "load5", "load15"]
    body = h.result("d-dummy7").body
    assert body["status"] == 3     # check_dummy refuses 7 itself: UNKNOWN either way
    assert h.runner.counters["agent.runs.started"] == 6


# ---------------------------------------------------------------- declared set

def test_local_declarations_checked_persisted_and_config_wins(tmp_path):
    path = str(tmp_path / "plugins.json")
    allowed = ["check_file_age", "x"]                            # the config's local.plugins
    declared = Declared([check("load", "check_load")], path, allowed)
    reg = protocol.make("REGISTER", "local", name="backup", plugins=[
        {"name": "backup_age", "command": "check_file_age", "args": ["-f", "/x"],
         "interval": 300, "timeout": 20}])
    plugins, forward = declared.prepare(reg)
    assert forward.body["plugins"] == [{"name": "backup_age", "interval": 300.0,
                                        "timeout": 20.0}]
    assert forward.msg_id == reg.msg_id
    declared.apply("backup", plugins)
    assert declared.get("backup_age") == Plugin("backup_age", "check_file_age", ("-f", "/x"),
                                                300.0, 20.0, "backup")
    again = Declared([check("load", "check_load")], path, allowed)       # after a restart
    assert again.get("backup_age") == declared.get("backup_age")
    for bad, status in (
            ([{"name": "load", "command": "x"}], 403),             # the config's
            ([{"name": "backup_age", "command": "x"}], 403),       # another process's
            ([{"name": "a", "command": "check_dummy"}], 403),      # not in local.plugins
            ([{"name": "a", "command": "negate"}], 403),           # an exec-wrapper
            (["check_disk"], 400),
            ([{"name": "a", "command": "/bin/sh"}], 400),
            ([{"name": "a", "command": "../x"}], 400),
            ([{"name": "a", "command": "x", "interval": -1}], 400),
            ([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}], 400),
            ({"name": "a"}, 400)):
        with pytest.raises(Refused) as e:
            again.prepare(protocol.make("REGISTER", "local", name="other", plugins=bad))
        assert e.value.status == status, bad
    # the config takes a name a process had: the config wins after the restart
    third = Declared([check("backup_age", "check_x")], path, allowed)
    assert third.get("backup_age").owner == "agent"
