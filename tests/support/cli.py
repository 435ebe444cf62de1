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
