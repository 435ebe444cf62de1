"""bench/rules.py: the fleet's values (the same in the engine's feed and in Prometheus'
exposition), the 20 rules valid on both sides, and a tiny run (``--quick``: 100 hosts, the
real engine and a real Prometheus, about 20 s; marked slow, as it starts processes)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from support import ROOT  # noqa: E402
sys.path.append(str(ROOT / "bench"))   # last: bench/web.py is not web/

import rules  # noqa: E402

COUNTERS = slice(16, 28)        # diskio.* and netio.* in rules.SERIES


def test_the_same_step_gives_the_same_values():
    a, b = rules.values(300, 7, 10.0), rules.values(300, 7, 10.0)
    assert a.shape == (300, len(rules.SERIES)) == (300, 30)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, rules.values(300, 8, 10.0))
    assert np.isfinite(a).all()


def test_counters_only_grow_but_on_the_hosts_that_restart():
    steps = [rules.values(1000, k, 10.0)[:, COUNTERS] for k in range(65)]
    restarting = [h for h in range(1000) if h % 800 == 9]
    for k in range(64):
        grew = steps[k + 1] >= steps[k]
        assert grew[[h for h in range(1000) if h not in restarting]].all()
    # k % 60: a reset (seen on the fast counters; the error counters barely move)
    assert (steps[60][restarting, :8] < steps[59][restarting, :8]).all()


def test_a_few_hosts_are_over_each_levels():
    v = rules.values(10_000, 30, 10.0)
    cpu = v[:, rules.SERIES.index("cpu.percent")]
    assert 10 <= (cpu > 90).sum() <= 40                 # hosts 1, 501, ...
    disk = v[:, rules.SERIES.index("disk.root.used_percent")]
    assert 50 <= (disk > 85).sum() <= 300               # the filling disks and the fullest


def test_the_rules_compile_for_the_engine():
    compiled = rules.engine_rules()
    assert [r.name for r in compiled] == [r[0] for r in rules.RULES]
    assert len(compiled) == 20
    read = set().union(*(r.expr.series for r in compiled))
    assert read <= set(rules.SERIES)


def test_prometheus_rules_name_the_same_series():
    names = {rules.prom_name(s) for s in rules.SERIES}
    for name, expr, *_, promql in rules.RULES:
        used = set(re.findall(r"fleetwatch_[a-z0-9_]+", promql))
        assert used and used <= names, name
        assert {rules.prom_name(s) for s in re.findall(r"[a-z]+\.[a-z0-9_.]+", expr)} \
            == used, name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus: promtool")
def test_promtool_accepts_the_rule_file(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(rules.rules_yaml(30.0))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "20 rules found" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus")
def test_a_quick_run_measures_both_sides():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "rules.py"), "--quick",
                           "--json"], capture_output=True, text=True, timeout=80, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    spans = doc["prometheus_spans"]
    assert [s["rules"] for s in spans] == [True, False]
    off = spans[1]
    # about six scrapes of 3,000 series (a loaded machine moves a span's edges by a scrape)
    assert 100 * 30 * 4 <= off["samples"] <= 100 * 30 * 8, off
    assert spans[0]["evaluations"] == 2                   # 6 s span, 3 s rule interval
    assert off["evaluations"] == 0
    f = doc["figures"]
    assert f["engine_rounds"][0]["evaluations"] == 4 * 100 * 20
    for side in ("engine", "prometheus"):
        assert f[side]["point_us"][0] > 0 and f[side]["core"][0] > 0
    assert doc["engine"]["series"] == 100 * len(doc["engine"]["keep"])
