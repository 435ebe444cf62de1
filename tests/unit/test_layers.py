"""The import rule: layers only point down. The layers, in :data:`LAYERS`, highest first:

    commands         fleetwatch.cli (and fleetwatch.__main__): import anything; nothing
                     imports them
    the console      web
    actions          fleetwatch.actions: what an operator changes, for the commands and
                     the console alike
    readers          query, fleetwatch.lake: what the components wrote, read and judged
    components       agent, router, sinks, scheduler, plugins
    the state store  fleetwatch.store: the state database (engines, schema, migrations,
                     reads)
    the core         fleetwatch (the rest): imports nothing of the above

A module imports its own package, the core, and what :data:`ALLOWED` lists for its package,
which is always in a lower layer or, sideways, another component. No file imports, however
indirectly, one that imports it (:func:`circles`).

Read from the source with :mod:`ast` (every ``import``, also those inside functions, which
is where the lazy imports are), so a new import that breaks the rule fails here, naming the
file and the line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def within(module: str, package: str) -> bool:
    """Whether ``module`` is ``package`` or one of its modules."""
    return module == package or module.startswith(package + ".")


PACKAGES = ("fleetwatch", "agent", "router", "sinks", "scheduler", "plugins", "web", "query")
CORE, CLI = "fleetwatch", "fleetwatch.cli"
ACTIONS, STORE = "fleetwatch.actions", "fleetwatch.store"
#: the layers, highest first: (name, its packages)
LAYERS = (
    ("commands", (CLI, "fleetwatch.__main__")),
    ("the console", ("web",)),
    ("actions", (ACTIONS,)),
    ("readers", ("query", "fleetwatch.lake")),
    ("components", ("agent", "router", "sinks", "scheduler", "plugins")),
    ("the state store", (STORE,)),
    ("the core", (CORE,)),
)
#: packages inside the core's name that are layers of their own, not the core (from LAYERS)
INSIDE_CORE = tuple(package for _, packages in LAYERS for package in packages
                    if within(package, CORE) and package != CORE
                    and not within(package, CLI) and package != "fleetwatch.__main__")

#: package -> the other packages' modules it may import: the sinks and the scheduler write
#: and read the state database (fleetwatch.store); the agent runs plugins and parses their
#: output (plugins); the console acts through the actions, which change and read the state
#: database (fleetwatch.store, sinks.alerting, query)
ALLOWED = {
    "sinks": (STORE,),
    "scheduler": (STORE,),
    "agent": ("plugins",),
    "web": (STORE, "query", ACTIONS),
    "query": (STORE, "sinks.alerting"),
    # the lake reads the landing files the history sink writes, the alert lifecycle from the
    # state database with the alerting rules (downtimes, silences, hosts), and replays into
    # carbon as the graphite sink sends
    "fleetwatch.lake": ("sinks.history", STORE, "sinks.alerting", "sinks.graphite"),
    ACTIONS: ("sinks.base", STORE, "sinks.alerting", "query"),
}


def layer(module: str) -> str:
    """The layer of a fleetwatch module: 'cli', 'core', a package of :data:`INSIDE_CORE`, or
    the component's package."""
    if within(module, CLI) or module == "fleetwatch.__main__":
        return "cli"
    for package in INSIDE_CORE:
        if within(module, package):
            return package
    top = module.split(".")[0]
    return "core" if top == CORE else top


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path):
    """(line, imported module) for every import in ``path`` of a fleetwatch package."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                yield node.lineno, name


def allowed(src: str, dst: str) -> bool:
    a, b = layer(src), layer(dst)
    if a == b or b == "core" or a == "cli":
        return True
    if b == "cli" or a == "core":
        return False
    return any(within(dst, edge) for edge in ALLOWED.get(a, ()))


def violations() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            src = module_name(path)
            for line, dst in imports(path):
                if not allowed(src, dst):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {src} ({layer(src)}) "
                                 f"imports {dst} ({layer(dst)})")
    return found


def test_layers_only_point_down():
    assert violations() == []


def rank(module: str) -> int:
    """The place in :data:`LAYERS` of the layer ``module`` belongs to (0: the highest)."""
    best = (-1, len(LAYERS))
    for place, (_, packages) in enumerate(LAYERS):
        for package in packages:
            if within(module, package) and len(package) > best[0]:
                best = (len(package), place)
    return best[1]


def test_every_allowed_edge_points_down_or_to_another_component():
    components = rank("sinks")
    for src, edges in ALLOWED.items():
        for dst in edges:
            assert rank(dst) > rank(src) or rank(dst) == rank(src) == components, (src, dst)


def test_the_layers_cover_every_package():
    assert all(rank(package) < len(LAYERS) for package in PACKAGES + INSIDE_CORE)
    assert rank("fleetwatch.store.db") > rank("sinks.alerting") > rank("query.fleet") > \
        rank("fleetwatch.actions.acks") > rank("web.app") > rank("fleetwatch.cli.status")


def test_the_rule_sees_what_it_must():
    assert not allowed("fleetwatch.protocol", "fleetwatch.store.db")
    assert not allowed("sinks.loop", "fleetwatch.cli.operator")
    assert not allowed("router.relay", "agent.spool")
    assert not allowed("scheduler.dispatch", "sinks.alerting.delivery.store")
    assert allowed("scheduler.main", "fleetwatch.store.reader")
    assert allowed("fleetwatch.cli.status", "fleetwatch.store.reader")
    assert allowed("agent.daemon", "fleetwatch.protocol")
    assert allowed("sinks.alerting.sink", "fleetwatch.store.db")
    assert not allowed("fleetwatch.store.db", "sinks.base")
    assert not allowed("router.relay", "fleetwatch.store.db")
    assert not allowed("sinks.history.sink", "fleetwatch.lake.schema")
    assert not allowed("fleetwatch.protocol", "fleetwatch.lake.query")
    assert allowed("fleetwatch.lake.compact", "sinks.history.landing")
    assert allowed("fleetwatch.cli.history.sql", "fleetwatch.lake.query")
    # the actions: below the commands, above the core; the console may call them
    assert layer("fleetwatch.actions.acks") == "fleetwatch.actions"
    assert allowed("fleetwatch.actions.acks", "sinks.alerting.acks.store")
    assert allowed("fleetwatch.actions.checks", "fleetwatch.ask")
    assert allowed("fleetwatch.actions.console", "fleetwatch.actions.acks")
    assert not allowed("fleetwatch.actions.acks", "fleetwatch.cli.operator")
    assert not allowed("fleetwatch.actions.console", "web.console")
    assert not allowed("fleetwatch.actions.checks", "router.relay")
    assert allowed("web.console", "fleetwatch.actions.console")
    assert allowed("fleetwatch.cli.ack", "fleetwatch.actions.acks")
    assert not allowed("fleetwatch.protocol", "fleetwatch.actions.database")
    assert not allowed("sinks.alerting.acks", "fleetwatch.actions.acks")
    assert not allowed("query.known", "fleetwatch.actions")


def test_lazy_imports_inside_functions_count(tmp_path, monkeypatch):
    source = tmp_path / "fleetwatch" / "x.py"
    source.parent.mkdir()
    source.write_text("def f():\n    from sinks import SINKS\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert [dst for _, dst in imports(source)] == ["sinks", "sinks.SINKS"]


def test_the_relays_parts_never_import_the_relay():
    """router/__init__.py: the relay makes its parts and hands them callables; none of them
    (nor the slow path) imports router.relay back."""
    found = []
    for path in sorted((ROOT / "router").glob("*.py")):
        if path.name not in ("relay.py", "main.py"):
            found += [f"{path.name}:{line}" for line, dst in imports(path)
                      if within(dst, "router.relay")]
    assert found == []


def circles(*folders: str) -> list[list[str]]:
    """The import circles among the files under ``folders`` (paths from the project's root):
    the strongly connected components (Tarjan's) of the graph from each file to the files it
    imports (every import, lazy or under TYPE_CHECKING alike: :func:`imports`; ``from P
    import x`` imports ``P`` and, when it is a file, ``P.x``), those of more than one file or
    of a file that imports itself; each as its module names, sorted."""
    files = {module_name(path): path for folder in folders
             for path in sorted((ROOT / folder).rglob("*.py"))}

    def file_of(name: str) -> str | None:          # web.store.Who: web.store
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    # (a package's __init__ that imports its own modules, ``from P import x``, names P too:
    # not an import of itself)
    edges = {src: sorted({dst for _, name in imports(path)
                          if (dst := file_of(name)) is not None
                          and not (dst == src and path.name == "__init__.py")})
             for src, path in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1 or node in edges[node]:
                found.append(sorted(component))

    for node in files:
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_anywhere():
    """No file of the project imports, however indirectly, one that imports it: within a
    layer too, modules import each other one way (web/'s application imports the routes,
    the routes what they share; sinks/alerting/port.py says which way its files go)."""
    assert circles(*PACKAGES) == []


def test_a_circle_is_seen_lazy_or_for_types_only(tmp_path, monkeypatch):
    package = tmp_path / "web"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "app.py").write_text("from web import pages\n")
    (package / "pages.py").write_text("def f():\n    from web.api import routes\n")
    (package / "api.py").write_text("from typing import TYPE_CHECKING\n"
                                    "if TYPE_CHECKING:\n    from web.app import Web\n")
    (package / "store.py").write_text("import web.store\n")
    (package / "auth.py").write_text("from web import store\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert circles("web") == [["web.api", "web.app", "web.pages"], ["web.store"]]


def test_a_circle_through_a_package_is_seen(tmp_path, monkeypatch):
    package = tmp_path / "sinks" / "x"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from sinks.x.b import f\n")
    (package / "b.py").write_text("def f():\n    from sinks.x import c\n")
    (package / "c.py").write_text("from sinks.x.a import g\n")
    (package / "d.py").write_text("from sinks.x import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert circles("sinks/x") == [["sinks.x.a", "sinks.x.b", "sinks.x.c"]]


def test_the_alerting_concepts_never_import_the_evaluation_nor_the_sink():
    """sinks/alerting/port.py: a concept (a package of sinks/alerting) acts on a transaction
    through its port; it imports neither the evaluation, nor the sink, nor the port's
    adapter, not even for type checking."""
    composers = ("sinks.alerting.evaluation", "sinks.alerting.sink",
                 "sinks.alerting.transaction")
    found = [f"{path.relative_to(ROOT)}:{line}: {dst}"
             for path in sorted((ROOT / "sinks" / "alerting").glob("*/*.py"))
             for line, dst in imports(path)
             if any(within(dst, c) for c in composers)]
    assert found == []
