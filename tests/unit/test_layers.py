"""The import rule: layers only point down.

    fleetwatch.cli            operator commands: import anything; nothing imports them
    agent router sinks        components: import the core; each other only
    scheduler plugins web     through the edges listed in ALLOWED
    fleetwatch (the rest)     the core: imports nothing of the above

(``fleetwatch.__main__``, ``python -m fleetwatch``, is the command line's entry: a command.)

Read from the source with :mod:`ast` (every ``import``, also those inside functions, which
is where the lazy imports are), so a new import that breaks the rule fails here, naming the
file and the line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fleetwatch", "agent", "router", "sinks", "scheduler", "plugins", "web", "query")
CORE, CLI = "fleetwatch", "fleetwatch.cli"

#: component -> the other components it may import: the scheduler and the console read and
#: write the state database (sinks.state); the agent runs plugins and parses their output
#: (plugins)
ALLOWED = {
    "scheduler": ("sinks.state",),
    "agent": ("plugins",),
    "web": ("sinks.state", "query"),
    "query": ("sinks.state", "sinks.alerting"),
}


def layer(module: str) -> str:
    """The layer of a fleetwatch module: 'cli', 'core', or the component's package."""
    if module == CLI or module.startswith(CLI + ".") or module == "fleetwatch.__main__":
        return "cli"
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
    return any(dst == edge or dst.startswith(edge + ".") for edge in ALLOWED.get(a, ()))


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


def test_the_rule_sees_what_it_must():
    assert not allowed("fleetwatch.protocol", "sinks.state.db")
    assert not allowed("sinks.loop", "fleetwatch.cli.operator")
    assert not allowed("router.relay", "agent.spool")
    assert not allowed("scheduler.dispatch", "sinks.alerting.delivery.store")
    assert allowed("scheduler.main", "sinks.state.reader")
    assert allowed("fleetwatch.cli.status", "sinks.state.reader")
    assert allowed("agent.daemon", "fleetwatch.protocol")


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
                      if dst == "router.relay" or dst.startswith("router.relay.")]
    assert found == []


def import_circles(top: Path) -> list[list[str]]:
    """The import circles among the files under ``top``: the strongly connected components
    (Tarjan's) of more than one file, or of one file that imports itself, of the graph of
    which file imports which (every import, lazy ones too; ``from P import x`` is an import
    of module ``P.x`` when there is one, else of ``P``)."""
    files = {module_name(path): path for path in sorted(top.rglob("*.py"))}

    def target(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in files:
            parts.pop()
        return ".".join(parts) or None
    edges = {src: sorted({t for _, dst in imports(path) if (t := target(dst)) is not None})
             for src, path in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

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
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges[node]:
                circles.append(sorted(component))
    for node in files:
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle_between_the_files_of_the_alerting_sink():
    """A concept's rules and store, the evaluation, the port and the sink import each other
    one way only (sinks/alerting/port.py says which)."""
    assert import_circles(ROOT / "sinks" / "alerting") == []


def test_the_circle_finder_sees_a_lazy_circle(tmp_path, monkeypatch):
    package = tmp_path / "sinks" / "x"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from sinks.x.b import f\n")
    (package / "b.py").write_text("def f():\n    from sinks.x import c\n")
    (package / "c.py").write_text("from sinks.x.a import g\n")
    (package / "d.py").write_text("from sinks.x import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert import_circles(package) == [["sinks.x.a", "sinks.x.b", "sinks.x.c"]]


def test_the_alerting_concepts_never_import_the_evaluation_nor_the_sink():
    """sinks/alerting/port.py: a concept (a package of sinks/alerting) acts on a transaction
    through its port; it imports neither the evaluation, nor the sink, nor the port's
    adapter, not even for type checking."""
    composers = ("sinks.alerting.evaluation", "sinks.alerting.sink",
                 "sinks.alerting.transaction")
    found = [f"{path.relative_to(ROOT)}:{line}: {dst}"
             for path in sorted((ROOT / "sinks" / "alerting").glob("*/*.py"))
             for line, dst in imports(path)
             if any(dst == c or dst.startswith(c + ".") for c in composers)]
    assert found == []
