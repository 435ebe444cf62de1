"""The table of sink types (fleetwatch/sinktypes.py) and what is derived from it."""

from __future__ import annotations

import importlib

import pytest

from fleetwatch import protocol, sinktypes
from fleetwatch.sinktypes import TYPES


def test_each_spooled_type_has_one_owner_that_acks_it():
    for spooled in sinktypes.SPOOLED:
        owners = [t.name for t in TYPES if spooled in t.owns]
        assert len(owners) == 1, spooled
        assert spooled in sinktypes.BY_NAME[owners[0]].acks


def test_a_type_acknowledges_only_what_it_takes():
    for t in TYPES:
        assert t.acks <= t.handles, t.name
        assert t.owns <= t.acks, t.name


def test_names_and_ports_are_unique():
    assert len({t.name for t in TYPES}) == len(TYPES)
    assert len({t.port for t in TYPES}) == len(TYPES)


def test_the_protocol_s_tables_are_spec_4_2():
    assert protocol.ACK_OWNERS == {"NOTIFY": "alerting", "REGISTER": "registry"}
    assert protocol.ACKING_SINKS == {"NOTIFY": ("alerting", "history"),
                                     "REGISTER": ("registry", "history")}


def test_the_routers_defaults_come_from_the_table():
    from router.config import DEFAULT_ROUTES, RouterBind
    assert DEFAULT_ROUTES["NOTIFY"] == ["alerting", "history"]
    assert DEFAULT_ROUTES["DEREGISTER"] == ["registry", "alerting"]
    assert set(DEFAULT_ROUTES) == set(sinktypes.ROUTED)
    assert RouterBind().sinks == {t.name: f"tcp://*:{t.port}" for t in TYPES}


@pytest.mark.parametrize("name", sinktypes.NAMES)
def test_each_sink_class_takes_and_acks_what_its_row_says(name):
    pytest.importorskip("sqlalchemy")
    from sinks import SINKS, load_sink
    cls = load_sink(name)
    assert SINKS[name] == sinktypes.BY_NAME[name].implementation
    assert (cls.type, cls.handles, cls.acks) == (name, sinktypes.BY_NAME[name].handles,
                                                 sinktypes.BY_NAME[name].acks)


def test_the_demo_runs_and_routes_every_type():
    plan = importlib.import_module("fleetwatch.cli.demo.plan")   # (the package has a plan())
    assert plan.SINK_TYPES == plan.ROUTED_TYPES == sinktypes.NAMES
