"""The agent a check run now names (``fleetwatch run``, the console), and what it declared.

A HOST|UUID argument is resolved against two maps of uuid -> hostname: the agents the
routers have attached now (their PEERS answers) and the agents the registry knows (the
state database's ``agents``). The registry's ``plugins`` say whether the agent declared the
plugin (an undeclared one is refused before sending) and with what timeout (how long to
wait for its RESULT). Plain functions over those maps, but :func:`state_db`, which reads
them.
"""

from __future__ import annotations

from fleetwatch import protocol
from fleetwatch.ask import Answer

#: declared plugins named in a refusal; more are counted
SHOWN_PLUGINS = 20


class Usage(Exception):
    """A bad argument; ``str()`` is the one line to print (exit 2)."""


def resolve(value: str, attached: dict[str, str | None],
            registry: dict[str, str | None]) -> tuple[str, str | None, bool]:
    """(uuid, hostname, known) for ``value``: a uuid, or a hostname of exactly one agent.

    ``attached`` and ``registry`` map uuids to hostnames (the routers' PEERS, the state
    database). A hostname several agents have goes to the one attached now, if only one is;
    otherwise it is ambiguous (:class:`Usage`). An unknown value that is a valid id is taken
    as a uuid (``known`` False): the routers will say whether they have it.
    """
    hostnames = {**registry, **{u: h or registry.get(u) for u, h in attached.items()}}
    if value in hostnames:
        return value, hostnames[value], True
    matches = sorted(u for u, h in hostnames.items() if h == value)
    live = [u for u in matches if u in attached]
    if len(live) == 1 or len(matches) == 1:
        uuid = (live or matches)[0]
        return uuid, value, True
    if matches:
        listed = ", ".join(f"{u}{' (attached)' if u in attached else ''}" for u in matches)
        raise Usage(f"{len(matches)} agents have the hostname {value!r}: {listed}; "
                    f"name one by uuid")
    if not protocol.ID_PATTERN.fullmatch(value):
        raise Usage(f"{value[:64]!r} is neither a known hostname nor a valid uuid")
    return value, None, False


def attached(answers: list[Answer]) -> dict[str, str | None]:
    """uuid -> hostname of the agents in the routers' PEERS answers."""
    out: dict[str, str | None] = {}
    for answer in answers:
        peers = answer.get("PEERS")
        for peer in (peers.get("agents") or []) if peers else []:
            if isinstance(peer, dict) and isinstance(peer.get("uuid"), str):
                hostname = peer.get("hostname")
                out[peer["uuid"]] = hostname if isinstance(hostname, str) else None
    return out


def state_db(url: str) -> tuple[dict[str, str | None], list[dict], str | None]:
    """uuid -> hostname and the declared plugins, from the state database if readable; and
    why it was not (None when it was)."""
    from fleetwatch.optional import MissingDependency
    from fleetwatch.store import state_reads
    from fleetwatch.store.reader import Reader, StateError
    reader = None
    try:
        reads = state_reads()
        reader = Reader(url)
        agents = {r["uuid"]: r.get("hostname") for r in reader.read(reads.agents)}
        return agents, reader.read(reads.plugins), None
    except (MissingDependency, StateError) as e:
        return {}, [], str(e)
    finally:
        if reader is not None:
            reader.close()


def declared_timeout(plugins: list[dict], uuid: str, plugin: str) -> float | None:
    """The timeout the agent declared for ``plugin`` (registry ``plugins`` spec), if any."""
    for row in plugins:
        spec = row.get("spec")
        if row.get("uuid") == uuid and row.get("name") == plugin and isinstance(spec, dict):
            value = spec.get("timeout")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return float(value)
    return None


def undeclared(plugins: list[dict], registry: dict[str, str | None], uuid: str,
               plugin: str) -> list[str] | None:
    """The plugins ``uuid`` declared, when the registry knows it and ``plugin`` is not one of
    them (the RUN would be refused by the agent); else None (declared, or not known)."""
    if uuid not in registry:
        return None
    names = sorted({r["name"] for r in plugins
                    if r.get("uuid") == uuid and isinstance(r.get("name"), str)})
    return None if plugin in names else names


def refusal(who: str, plugin: str, declared: list[str]) -> str:
    """One line: ``who`` did not declare ``plugin``, and what it did declare."""
    shown = [n if protocol.ID_PATTERN.fullmatch(n) else ascii(n)
             for n in declared[:SHOWN_PLUGINS]]
    more = f" and {len(declared) - SHOWN_PLUGINS} more" if len(declared) > SHOWN_PLUGINS else ""
    what = f"it declared {', '.join(shown)}{more}" if shown else "it declared no plugins"
    return (f"{who} did not declare {plugin!r} ({what}, says the registry): not sent; "
            f"--force sends it anyway")
