"""Dependencies: which hosts and checks a host or a check can only be reached through.

Pure logic; no SQL (the sink's side is :mod:`sinks.alerting.dependencies.store`). The semantics
are Icinga 2's dependencies (and Nagios' host parents): when a parent is DOWN, or a parent
check is in a HARD problem, a child that goes silent is UNREACHABLE, not DOWN, and pages
nobody; one page goes out, for the parent.

A parent is named by a **reference** (:func:`parse`): ``HOST`` (an agent's hostname, ``sw-3``)
or ``HOST/CHECK`` (a check on any host: ``poller-1/ping_sw3``, the switch pinged from a
poller); among a check's parents ``CHECK`` alone is a check of the same host (the HTTP check
depends on the host's ``nginx_proc``). A host's parents come from two places:

- the alerting config, ``alerting.dependencies``: rules with a glob on the child's hostname
  (and, for a check's parents, a glob on its check names) and the parents they give
  (:class:`Dependency`); a cycle among them is refused at start (:func:`config_cycle`);
- the agent itself, ``parents:`` in its config, sent in its HELLO and REGISTER and kept by
  the registry, so a dynamic fleet declares its own topology. A cycle these declarations
  make is broken (the declared edge that closes it is dropped, :attr:`Graph.broken`) and
  the caller logs it: input never stops the sink.

A check also depends on its own host (a check of an UNREACHABLE host is held), which the
cycle search follows. :meth:`Graph.ancestors` gives the hosts a host depends on, however far
(a downtime with ``--children`` covers the hosts whose ancestors include its host).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fleetwatch.config import setting

#: a reference's longest text (the ``unreachable`` columns hold one)
MAX_REF = 512
#: parents one agent may declare (more are ignored)
MAX_DECLARED = 64


@dataclass(frozen=True)
class Ref:
    """A host (``check`` None) or a check of a host."""

    host: str
    check: str | None = None

    def __str__(self) -> str:
        return self.host if self.check is None else f"{self.host}/{self.check}"

    def key(self) -> tuple[str, str]:
        """Its order: a host before its checks."""
        return self.host, self.check or ""


def parse(text: str, host: str | None = None) -> Ref:
    """The reference ``text`` names: ``HOST`` or ``HOST/CHECK``; with ``host`` (a check's
    parents), ``CHECK`` alone is a check of ``host``. Raises ValueError saying why not."""
    if not isinstance(text, str) or not text.strip() or text != text.strip():
        raise ValueError(f"{str(text)[:60]!r} is not a reference (HOST or HOST/CHECK)")
    if len(text) > MAX_REF:
        raise ValueError(f"{text[:60]!r}...: a reference is at most {MAX_REF} characters")
    first, slash, rest = text.partition("/")
    if slash and (not first or not rest or "/" in rest):
        raise ValueError(f"{text[:60]!r} is not a reference (HOST or HOST/CHECK)")
    if slash:
        return Ref(first, rest)
    return Ref(host, text) if host is not None else Ref(text)


@dataclass(frozen=True)
class Dependency:
    """One ``alerting.dependencies`` rule: the hosts (or their checks) it gives parents."""

    hosts: str = setting(help="glob on the child's hostname, e.g. rack3-*")
    parents: list[str] = setting(help="the parents: HOST (an agent's hostname) or HOST/CHECK "
                                      "(a check on any host); in a rule with checks, CHECK "
                                      "alone is a check of the child's own host")
    checks: str = setting("", "glob on the child's check names: the rule gives those checks "
                              "parents; empty: it gives the host itself parents")

    def validate(self):
        if not self.hosts:
            raise ValueError("hosts: expected a glob on hostnames")
        if not self.parents:
            raise ValueError("parents: expected at least one parent")
        try:
            self.refs(self.hosts)
        except ValueError as e:
            raise ValueError(f"parents: {e}") from None

    def matches(self, node: Ref) -> bool:
        if not fnmatch.fnmatchcase(node.host, self.hosts):
            return False
        if node.check is None:
            return not self.checks
        return bool(self.checks) and fnmatch.fnmatchcase(node.check, self.checks)

    def refs(self, host: str) -> tuple[Ref, ...]:
        """The parents this rule gives a child of ``host``."""
        return tuple(parse(p, host if self.checks else None) for p in self.parents)


def declared_refs(values) -> tuple[tuple[Ref, ...], int]:
    """An agent's declared ``parents`` (a list of HOST or HOST/CHECK): the references, and
    how many entries were not one (skipped)."""
    if not isinstance(values, list):
        return (), 0 if values is None else 1
    refs, bad = [], 0
    for value in values[:MAX_DECLARED]:
        try:
            refs.append(parse(value))
        except ValueError:
            bad += 1
    return tuple(dict.fromkeys(refs)), bad + max(0, len(values) - MAX_DECLARED)


def path_text(cycle: Iterable[Ref]) -> str:
    return " -> ".join(str(r) for r in cycle)


class Graph:
    """The parents of every host and check, from config rules and agents' declarations.

    ``declared`` maps a hostname to the parents its agent declared. Built once per change
    of either; the parents of each node are computed when first asked and kept.
    """

    def __init__(self, rules: Iterable[Dependency] = (),
                 declared: Mapping[str, Iterable[Ref]] | None = None):
        self.rules = tuple(rules)
        self.declared = {h: tuple(r for r in refs if r != Ref(h))
                         for h, refs in (declared or {}).items()}
        self._parents: dict[Ref, tuple[Ref, ...]] = {}
        #: cycles the declarations made, each broken by dropping its last declared edge
        self.broken: list[tuple[Ref, ...]] = []
        self._break_cycles()

    def __bool__(self) -> bool:
        return bool(self.rules) or any(self.declared.values())

    def parents(self, node: Ref) -> tuple[Ref, ...]:
        """The direct parents of a host (``Ref(host)``) or of a check (``Ref(host, check)``)."""
        found = self._parents.get(node)
        if found is None:
            refs = list(self.declared.get(node.host, ())) if node.check is None else []
            for rule in self.rules:
                if rule.matches(node):
                    refs.extend(rule.refs(node.host))
            found = tuple(r for r in dict.fromkeys(refs) if r != node)
            if len(self._parents) > 100_000:
                self._parents.clear()
            self._parents[node] = found
        return found

    def edges(self, node: Ref) -> tuple[Ref, ...]:
        """What ``node`` depends on directly: its parents, and a check its own host."""
        own = (Ref(node.host),) if node.check is not None else ()
        return self.parents(node) + own

    def ancestors(self, hostname: str) -> set[str]:
        """The hosts ``hostname`` depends on, however far (its own name excluded)."""
        seen: set[Ref] = set()
        todo = [Ref(hostname)]
        while todo:
            for parent in self.edges(todo.pop()):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return {r.host for r in seen} - {hostname}

    def cycle(self, starts: Iterable[Ref]) -> tuple[Ref, ...] | None:
        """The first cycle reached from ``starts`` (``a -> b -> a``), or None."""
        done: set[Ref] = set()
        for start in sorted(set(starts), key=Ref.key):
            if start in done:
                continue
            path, on_path = [start], {start}
            stack = [iter(self.edges(start))]
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    stack.pop()
                    finished = path.pop()
                    on_path.discard(finished)
                    done.add(finished)
                    continue
                if nxt in on_path:
                    return (*path[path.index(nxt):], nxt)
                if nxt in done:
                    continue
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(self.edges(nxt)))
        return None

    def _break_cycles(self) -> None:
        if not self.declared:
            return
        starts = [Ref(h) for h in self.declared]
        for _ in range(1000):
            cycle = self.cycle(starts)
            if cycle is None:
                return
            self.broken.append(cycle)
            edges = list(zip(cycle, cycle[1:]))
            # the last declared edge of the cycle (a config-only cycle was refused at start)
            for child, parent in reversed(edges):
                if child.check is None and parent in self.declared.get(child.host, ()):
                    self.declared[child.host] = tuple(
                        r for r in self.declared[child.host] if r != parent)
                    break
            else:
                return                  # (not made by declarations: nothing of ours to drop)
            self._parents.clear()


def representatives(rules: Iterable[Dependency]) -> list[Ref]:
    """Nodes standing for every rule's children and parents: a glob stands for the hosts it
    matches (it matches itself), a named parent for itself."""
    nodes: list[Ref] = []
    for rule in rules:
        nodes.append(Ref(rule.hosts, rule.checks or None))
        nodes.extend(rule.refs(rule.hosts))
    return nodes


def config_cycle(rules: Iterable[Dependency]) -> tuple[Ref, ...] | None:
    """A cycle among the config's rules alone (refused at start), or None."""
    rules = tuple(rules)
    return Graph(rules).cycle(representatives(rules)) if rules else None
