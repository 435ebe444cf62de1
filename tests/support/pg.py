"""A throwaway PostgreSQL cluster for tests: initdb, start on 127.0.0.1, a database per test.

Debian's ``postgresql`` package (installed by ``make install``) provides the binaries in
``/usr/lib/postgresql/VERSION/bin``; :func:`find_bindir` returns None when they are absent
and the ``pg_cluster`` fixture then skips. initdb refuses to run as root, so as root the
server runs as the ``postgres`` user in a private directory it owns:
trust authentication, listening on 127.0.0.1 only on a free port, its unix socket in that
directory, durability off (a test cluster: fsync, synchronous_commit and full-page writes
cost time and buy nothing). :meth:`PgCluster.stop` stops it and removes the directory.

    python tests/support/pg.py     # start one, print its URL, stop it on Enter (for debugging)
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fleetwatch.cli.demo.ports import free_port   # outside the ephemeral range: no race

DRIVER = "postgresql+psycopg"


def find_bindir() -> str | None:
    """The newest ``/usr/lib/postgresql/*/bin`` holding initdb, pg_ctl and postgres."""
    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if all(os.access(os.path.join(bindir, b), os.X_OK)
               for b in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


class PgCluster:
    def __init__(self, bindir: str):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="fwpg-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.log = self.root / "postgres.log"
        self.port = 0
        self._names = itertools.count(1)
        self._user = "postgres" if os.geteuid() == 0 else None
        self.sock.mkdir()
        if self._user:
            for path in (self.root, self.sock):
                shutil.chown(path, self._user, self._user)

    def _run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        kwargs = {"user": self._user, "group": self._user} if self._user else {}
        res = subprocess.run([os.path.join(self.bindir, argv[0]), *argv[1:]], cwd=self.root,
                             capture_output=True, text=True, timeout=timeout, **kwargs)
        if res.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {res.returncode}: {res.stderr.strip()}\n"
                               f"{self.tail_log()}")
        return res

    def tail_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def start(self) -> "PgCluster":
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        for attempt in range(3):    # the free port may be taken between picking and binding
            self.port = free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} "
                       f"-c unix_socket_directories={self.sock} -c fsync=off "
                       f"-c synchronous_commit=off -c full_page_writes=off")
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                          "-t", "30", "-o", options, "start")
                return self
            except RuntimeError:
                if attempt == 2:
                    raise
        return self

    def url(self, database: str = "postgres") -> str:
        return f"{DRIVER}://postgres@127.0.0.1:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its SQLAlchemy URL."""
        name = name or f"fw_{os.getpid()}_{next(self._names)}"
        self._admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.port and (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            except (RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":
    found = find_bindir()
    if found is None:
        raise SystemExit("no PostgreSQL binaries in /usr/lib/postgresql/*/bin")
    cluster = PgCluster(found).start()
    try:
        print(cluster.create_database("fleetwatch"))
        input("running; Enter stops it ")
    finally:
        cluster.stop()
