"""Durable routes (SPEC 4.1) as logic: the router's config, its drop ledger, what an agent
makes of the WELCOMEs it gets, its spool under a changed requirement, and what
``fleetwatch status`` says of the fleet."""

from __future__ import annotations

import dataclasses

import pytest

from agent.spool import Spool
from agent.spool.acks import AckRule, FleetRoutes
from fleetwatch import durability, protocol
from fleetwatch.ask import Answer
from fleetwatch.config import ConfigError, build
from router.config import RouterConfig
from router.drops import PER_MESSAGE, DropLedger
from support.clock import Clock
from support import ROOT

OWNERS = {"NOTIFY": ("alerting",), "REGISTER": ("registry",)}


# ---------------------------------------------------------------- the router's config

def test_by_default_notify_and_register_are_durable_for_their_owner_and_history():
    assert RouterConfig().durable_routes() == {"NOTIFY": ["alerting", "history"],
                                               "REGISTER": ["registry", "history"]}


def test_a_route_the_table_does_not_have_is_not_durable():
    cfg = RouterConfig()
    no_history = {t: [s for s in sinks if s != "history"] for t, sinks in cfg.routes.items()}
    assert dataclasses.replace(cfg, routes=no_history).durable_routes() == {
        "NOTIFY": ["alerting"], "REGISTER": ["registry"]}


def test_durable_names_only_what_must_be_acked_and_keeps_defaults_for_the_rest():
    cfg = build(RouterConfig, {"durable": {"NOTIFY": ["alerting"]}})
    assert cfg.durable_routes() == {"NOTIFY": ["alerting"],
                                    "REGISTER": ["registry", "history"]}
    assert build(RouterConfig, {"durable": {"NOTIFY": []}}).durable_routes()["NOTIFY"] == []


@pytest.mark.parametrize("durable, error", [
    ({"STATS": ["graphite"]}, "durable.STATS: expected one of NOTIFY, REGISTER"),
    ({"NOTIFY": ["graphite"]}, "durable.NOTIFY: 'graphite' does not ACK NOTIFY"),
    ({"REGISTER": ["alerting"]}, "durable.REGISTER: 'alerting' does not ACK REGISTER"),
])
def test_a_durable_route_no_sink_type_can_ack_is_refused(durable, error):
    with pytest.raises(ConfigError, match=error):
        build(RouterConfig, {"durable": durable})


# ---------------------------------------------------------------- the drop ledger

def test_the_ledger_counts_per_agent_type_and_sink_with_first_and_last():
    ledger = DropLedger()
    for t in (10.0, 11.0, 12.5):
        ledger.add("a", "HEARTBEAT", "history", t)
    ledger.add("b", "NOTIFY", "alerting", 11.5)
    assert [item for _, item in ledger.oldest(10)] == [
        {"uuid": "a", "type": "HEARTBEAT", "sink": "history", "count": 3, "first": 10.0,
         "last": 12.5},
        {"uuid": "b", "type": "NOTIFY", "sink": "alerting", "count": 1, "first": 11.5,
         "last": 11.5}]


def test_entries_leave_only_once_reported_and_later_drops_stay():
    ledger = DropLedger()
    ledger.add("a", "HEARTBEAT", "history", 10.0)
    items = ledger.oldest(10)
    ledger.add("a", "HEARTBEAT", "history", 20.0)      # after the report was made
    ledger.reported(items)
    assert [item for _, item in ledger.oldest(10)] == [
        {"uuid": "a", "type": "HEARTBEAT", "sink": "history", "count": 1, "first": 10.0,
         "last": 20.0}]
    ledger.reported(ledger.oldest(10))
    assert len(ledger) == 0 and ledger.reported_entries == 2


def test_a_full_ledger_counts_instead_of_growing():
    ledger = DropLedger(max_entries=2)
    for uuid in "abc":
        ledger.add(uuid, "STATS", "history", 1.0)
    ledger.add("a", "STATS", "history", 2.0)            # an entry it has still counts
    assert len(ledger) == 2 and ledger.unledgered == 1
    assert ledger.oldest(1)[0][1]["count"] == 2


def test_a_report_is_cut_into_bodies_within_the_limit():
    ledger = DropLedger()
    for n in range(PER_MESSAGE * 2 + 3):
        ledger.add(f"agent-{n:05d}", "HEARTBEAT", "alerting", 1.0)
    chunks = ledger.chunks()
    assert [len(c) for c in chunks] == [PER_MESSAGE, PER_MESSAGE, 3]
    body = protocol.encode_body(protocol.make("STATS", "router-1", metrics={},
                                              drops=[d for _, d in chunks[0]]))
    assert len(body) < protocol.MAX_BODY // 2


# ---------------------------------------------------------------- the agent's side

def test_before_any_router_tells_the_config_holds():
    assert FleetRoutes(OWNERS).required() == OWNERS


def test_the_routers_durable_routes_replace_the_config_and_add_up():
    routes = FleetRoutes(OWNERS)
    assert routes.tell("router-1", {"NOTIFY": ["alerting", "history"],
                                    "REGISTER": ["registry"]}) == {
        "NOTIFY": ("alerting", "history"), "REGISTER": ("registry",)}
    # another router that routes REGISTER to history too: the union
    assert routes.tell("router-2", {"NOTIFY": ["alerting"],
                                    "REGISTER": ["registry", "history"]}) == {
        "NOTIFY": ("alerting", "history"), "REGISTER": ("registry", "history")}
    # router-1 changed its mind: only its latest WELCOME counts
    assert routes.tell("router-1", {"NOTIFY": ["alerting"], "REGISTER": ["registry"]}) == {
        "NOTIFY": ("alerting",), "REGISTER": ("registry", "history")}


def test_a_router_older_than_durable_routes_stands_for_the_config():
    routes = FleetRoutes(OWNERS)
    routes.tell("new", {"NOTIFY": ["history"], "REGISTER": ["history"]})
    assert routes.tell("old", None) == {"NOTIFY": ("history", "alerting"),
                                        "REGISTER": ("history", "registry")}


@pytest.mark.parametrize("durable", [
    "NOTIFY", ["NOTIFY"], {"NOTIFY": "alerting"}, {"NOTIFY": [1, None]},
    {"NOTIFY": ["graphite"]}, {"STATS": ["history"]}])
def test_what_a_router_cannot_mean_is_left_to_the_config(durable):
    parsed = FleetRoutes.parse(durable)
    assert all(s in ("alerting", "history", "registry") for v in parsed.values() for s in v)
    required = FleetRoutes(OWNERS).tell("r", durable)
    assert required["REGISTER"] == ("registry",)
    assert required["NOTIFY"] in (("alerting",), ())


def test_a_type_no_durable_route_takes_needs_no_ack():
    rule = AckRule({"NOTIFY": (), "REGISTER": ("registry",)})
    assert rule.needs_none("NOTIFY") and not rule.needs_none("REGISTER")
    assert rule.complete("NOTIFY", [])


def make_spool(path, clock):
    return Spool(str(path), ack_timeout=1.0, max_backoff=4.0, clock=clock, required=OWNERS)


def test_a_spool_waits_for_what_the_routers_say_and_remembers_it_over_a_restart(tmp_path):
    clock = Clock(1_800_000_000.0)
    spool = make_spool(tmp_path / "spool.db", clock)
    spool.retarget({"NOTIFY": ("alerting", "history"), "REGISTER": ("registry",)})
    note = protocol.make("NOTIFY", "me", clock=clock, severity="info", text="x")
    spool.add([note])
    assert spool.ack([note.msg_id], "alerting").removed == []      # history has not
    spool.close()
    again = make_spool(tmp_path / "spool.db", clock)                # no WELCOME yet
    assert again.required["NOTIFY"] == {"alerting", "history"}
    assert again.pending() == [note.msg_id]
    assert again.ack([note.msg_id], "history").removed == [note.msg_id]


def test_a_requirement_dropped_completes_what_only_it_held(tmp_path):
    clock = Clock(1_800_000_000.0)
    spool = make_spool(tmp_path / "spool.db", clock)
    spool.retarget({"NOTIFY": ("alerting", "history"), "REGISTER": ("registry",)})
    notes = [protocol.make("NOTIFY", "me", clock=clock, severity="info", text=str(n))
             for n in range(3)]
    spool.add(notes)
    spool.ack([notes[0].msg_id, notes[1].msg_id], "alerting")
    assert spool.retarget({"NOTIFY": ("alerting",), "REGISTER": ("registry",)}) == 2
    assert spool.pending() == [notes[2].msg_id] and len(spool) == 1


def test_an_ack_from_a_type_not_required_yet_is_noted_for_later(tmp_path):
    clock = Clock(1_800_000_000.0)
    spool = make_spool(tmp_path / "spool.db", clock)
    note = protocol.make("NOTIFY", "me", clock=clock, severity="info", text="x")
    spool.add([note])
    acked = spool.ack([note.msg_id], "history")             # only alerting required
    assert acked.removed == [] and acked.ignored == 1
    assert spool.acked_by(note.msg_id) == ["history"]
    spool.retarget({"NOTIFY": ("alerting", "history"), "REGISTER": ("registry",)})
    assert spool.ack([note.msg_id], "alerting").removed == [note.msg_id]


# ---------------------------------------------------------------- what status says

def answer(router: str, sinks: dict | None, durable: dict | None) -> Answer:
    body = {"router": router, "agents": [], "total": 0}
    if sinks is not None:
        body.update(sinks=sinks, durable=durable)
    return Answer(f"tcp://{router}:5556",
                  {"PEERS": protocol.make("PEERS", router, **body)})


DEFAULT = {"NOTIFY": ["alerting", "history"], "REGISTER": ["registry", "history"]}


def test_the_fleet_is_durable_when_some_router_has_each_sink_type():
    found = durability.assess([
        answer("r1", {"alerting": 1, "history": 1, "registry": 1}, DEFAULT),
        answer("r2", {"alerting": 1, "history": 0, "registry": 1}, DEFAULT)])
    assert found["state"] == durability.OK and found["missing"] == []
    assert found["partial"] == [{"type": "NOTIFY", "sink": "history", "not_served_by": ["r2"]},
                                {"type": "REGISTER", "sink": "history",
                                 "not_served_by": ["r2"]}]
    assert durability.lines(found) == [
        "durability: ok (NOTIFY -> alerting, history; REGISTER -> registry, history)",
        "  NOTIFY -> history: no history sink on r2 (agents resend through the others)",
        "  REGISTER -> history: no history sink on r2 (agents resend through the others)"]


def test_no_sink_of_a_durable_type_on_any_router_is_degraded():
    found = durability.assess([answer("r1", {"alerting": 2, "registry": 1}, DEFAULT),
                               answer("r2", {"alerting": 1, "registry": 1, "history": 0},
                                      DEFAULT)])
    assert found["state"] == durability.DEGRADED
    assert found["missing"] == [{"type": "NOTIFY", "sink": "history"},
                                {"type": "REGISTER", "sink": "history"}]
    assert durability.lines(found) == [
        "durability: DEGRADED: no history sink connected to any router: NOTIFY, REGISTER "
        "wait in the agents' spools until one is"]


def test_routers_that_do_not_say_leave_it_unknown():
    found = durability.assess([answer("old", None, None), Answer("tcp://gone:5556")])
    assert found["state"] == durability.UNKNOWN and found["routes"] == []


def test_the_ansible_role_writes_the_routing_table_of_the_code():
    """The router role cuts the default routing table to the sink types deployed; its copy
    of the table is the code's."""

    import yaml

    from router.config import DEFAULT_ROUTES
    defaults = ROOT / "ansible/roles/fleetwatch_router/defaults/main.yml"
    assert yaml.safe_load(defaults.read_text())["fleetwatch_router_default_routes"] == \
        DEFAULT_ROUTES
