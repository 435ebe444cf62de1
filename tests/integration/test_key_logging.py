"""SECURITY.md: "Logs never contain secret keys (at most the first characters of a public
key)". Real processes with CURVE on; their real logs are read."""

from __future__ import annotations

from support.fleet import agent_uuid_for, wait_for
from support.keys import Keys

from fleetwatch.security import key_hint, read_certificate


def test_logs_show_a_public_key_prefix_never_the_whole_key(fleet):
    keys = Keys(fleet.root)
    # both keys before the router starts: an agent key the router has not read yet would be
    # refused first, and the refusal log (once per 10 s per reason) would name that key
    admitted = keys.agent(agent_uuid_for(fleet, "agent"))
    # a key outside the allowlist: the router logs its refusal, naming the key
    stranger = keys.agent(agent_uuid_for(fleet, "stranger"), sub="elsewhere")
    router = fleet.router(security=keys.router_security())
    agent = fleet.agent([router], security=keys.client(admitted))
    other = fleet.agent([router], name="stranger", security=keys.client(stranger))
    wait_for(lambda: "CURVE on" in agent.log() and "CURVE on" in other.log(), 15,
             what="both agents started with CURVE")
    wait_for(lambda: "refused a connection" in router["proc"].log(), 15,
             what="the router refusing the stranger's key")
    wait_for(lambda: "alive" in agent.log(), 15, what="the admitted agent welcomed")

    publics = [read_certificate(path).public.decode() for path in (admitted, stranger)]
    logs = {p.name: p.log() for p in (agent, other, router["proc"])}
    for name, text in logs.items():
        for public in publics:
            assert public not in text, f"{name} logged a whole public key"
    for public, proc in zip(publics, ("agent", "stranger")):
        assert key_hint(public) in logs[proc]
    assert key_hint(publics[1]) in logs["router-1"]
    assert publics[0][:8] in key_hint(publics[0]) and len(key_hint(publics[0])) < 20
