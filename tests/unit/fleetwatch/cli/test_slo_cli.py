"""``fleetwatch slo list|report [NAME...] [--json]`` on a SQLite state database an alerting
sink's SLO passes filled (support/slos.py: one SLO paging for web-1, one without events), run
in-process through the registry; the text escaped, the exit statuses."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from support.cli import fw, operator_config
from support.slos import WEB, fill

HOSTILE = "web-1\x1b[31m"


@pytest.fixture
def op(tmp_path):
    path = operator_config(tmp_path)
    url = yaml.safe_load(open(path, encoding="utf-8"))["state_url"]
    start = time.time() - 1800.0
    fill(url, HOSTILE, now=start - start % 60)          # (ends about now)
    return path


def test_list(op, capsys):
    code, out, _ = fw(capsys, "slo", "--config", op)
    assert code == 0
    head, http, quiet = out.splitlines()
    assert head.split() == ["NAME", "OBJECTIVE", "WINDOW", "COUNTS", "HOSTS", "PER_HOST",
                            "DOWNTIME", "STATE", "SINCE"]
    assert http.split()[:9] == ["http_availability", "99.9%", "30d", "results", "of",
                                "checks", "http*", "*", "yes"]
    assert http.split()[9:11] == ["bad", "page"] and http.endswith("UTC")
    assert quiet.split() == ["quiet", "99%", "7d", "time", "of", "rules", "disk*",
                             "web*,site:paris", "no", "excluded", "ok", "-"]
    code, out, _ = fw(capsys, "slo", "list", "quiet", "--json", "--config", op)
    found = json.loads(out)
    assert code == 0 and [s["name"] for s in found["slos"]] == ["quiet"]
    assert found["alerting"] == 0 and found["slos"][0]["rules"] == ["disk*"]


def test_report(op, capsys):
    code, out, _ = fw(capsys, "slo", "report", "--config", op)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "OBJECTIVE", "WINDOW", "SLI", "BUDGET_LEFT",
                                "BURN_5M", "BURN_30M", "BURN_1H", "BURN_6H", "STATE"]
    http = lines[1].split()
    assert http[:3] == ["http_availability", "99.9%", "30d"] and http[-1] == "page"
    assert all(rate.endswith("x") for rate in http[5:9])
    assert lines[2].split() == ["quiet", "99%", "7d", "-", "-", "-", "-", "-", "-", "ok"]
    assert "http_availability: results of checks http* on *; page at 14.4x (1h and 5m), " \
           "ticket at 6x (6h and 30m); good 100, bad 20, excluded 0; 1 host(s) alerting" in out
    offenders = out.split("host(s) alerting\n")[1].splitlines()
    assert offenders[0].split() == ["HOSTNAME", "SPENT", "BAD", "GOOD", "BUDGET_LEFT",
                                    "STATE"]
    assert offenders[1].startswith("web-1\\x1b[31m ") and offenders[1].split()[-1] == "page"
    assert "\x1b" not in out
    code, out, _ = fw(capsys, "slo", "report", "--json", "--offenders", "1", "--config", op)
    (http, quiet) = json.loads(out)["slos"]
    assert code == 0 and http["state"] == "page" and http["told"] == "page"
    assert [(o["uuid"], o["hostname"]) for o in http["offenders"]] == [(WEB, HOSTILE)]
    assert http["sli"] == pytest.approx(100 * 100 / 120, abs=1e-3) and quiet["sli"] is None
    assert set(http) >= {"budget_left", "burn", "good", "bad", "excluded", "page_at",
                         "ticket_at", "since", "judged", "configured", "window_seconds"}


def test_an_slo_no_sink_has_and_bad_arguments(op, capsys):
    code, out, err = fw(capsys, "slo", "report", "http_availability", "nope\x1b",
                        "--config", op)
    assert code == 1 and "http_availability" in out
    assert err == "fleetwatch slo: no SLO nope\\x1b in any alerting sink's config\n"
    assert fw(capsys, "slo", "report", "--offenders", "-1", "--config", op)[0] == 2


def test_no_slos_and_no_database(tmp_path, capsys):
    op = operator_config(tmp_path)
    code, out, _ = fw(capsys, "slo", "report", "--config", op)
    assert code == 0 and out.startswith("no SLOs: no alerting sink has any")
    assert json.loads(fw(capsys, "slo", "--json", "--config", op)[1]) == {
        "slos": [], "alerting": 0}
    (tmp_path / "state.db").write_text("not a database")
    code, _, err = fw(capsys, "slo", "--config", op)
    assert code == 69 and err.startswith("fleetwatch slo: cannot read the state database")
