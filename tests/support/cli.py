"""The ``fleetwatch`` command run in this process (``cli.main``), and an operator config for it."""

from __future__ import annotations

from fleetwatch import cli


def operator_config(tmp_path) -> str:
    """An operator config whose state database is an (empty) SQLite file in ``tmp_path``."""
    db = tmp_path / "state.db"
    db.touch()
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: sqlite:///{db}\n")
    return str(path)


def fw(capsys, *argv: str) -> tuple[int, str, str]:
    """``fleetwatch ARGV...`` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def register(config: str, hosts: dict[str, list[str]]) -> None:
    """Record ``hosts`` (hostname -> its declared checks) in the state database of the
    operator config ``config`` as the registry sink would: the fleet has seen them (uuid
    ``uuid-HOSTNAME``)."""
    import time

    import yaml
    from sqlalchemy import insert

    from fleetwatch.store import db, schema
    eng = db.engine(yaml.safe_load(open(config, encoding="utf-8"))["state_url"])
    db.create(eng, "registry")
    now = time.time()
    with eng.begin() as conn:
        for host, checks in hosts.items():
            uuid = f"uuid-{host}"
            conn.execute(insert(schema.agents).values(uuid=uuid, hostname=host,
                                                      first_seen=now, last_seen=now))
            for check in checks:
                conn.execute(insert(schema.plugins).values(uuid=uuid, source="", name=check,
                                                           spec={}, declared_at=now))
    eng.dispose()
