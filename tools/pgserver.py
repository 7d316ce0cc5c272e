"""A throwaway PostgreSQL cluster that a test or the chaos runner owns, so it may restart or crash it.

    with ThrowawayPostgres() as server:
        server.create_database("weave_restart")
        url = server.url("weave_restart")
        ...
        server.restart("fast")       # clean shutdown: sessions are told (57P01), then cut
        server.restart("immediate")  # a crash: no checkpoint, crash recovery on the next start

It uses the newest PostgreSQL binaries under /usr/lib/postgresql (or `PG_BIN`), listens on a free port
on 127.0.0.1 only (or on the loopback address `relocate()` moved it to), and never touches another
server. Running as root, the data directory belongs to
the `postgres` user and the binaries run through `runuser`, because PostgreSQL refuses to run as root.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def postgres_bin() -> Path | None:
    """The directory of the newest installed PostgreSQL binaries, or None when there is none."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return None
    found = [p / "bin" for p in root.iterdir() if (p / "bin" / "pg_ctl").exists()]
    if not found:
        return None
    return max(found, key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.name.split(".")])


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at `host` now (for a server about to move there)."""
    return _free_port(host)


class ThrowawayPostgres:
    """initdb, start, restart, stop and delete one private cluster."""

    def __init__(
        self, *, port: int | None = None, bin_dir: Path | None = None, also_listen: tuple[str, ...] = ()
    ) -> None:
        found = bin_dir or postgres_bin()
        if found is None:
            raise RuntimeError("No PostgreSQL binaries found (set PG_BIN to the directory holding pg_ctl).")
        self.bin_dir = found
        self.port = port or _free_port()
        self.host = "127.0.0.1"
        # More local addresses to listen on (e.g. a test bridge's), each given /24 trust in pg_hba.conf.
        self.also_listen = also_listen
        self.root: Path | None = None
        self.restarts: list[tuple[str, float]] = []  # (mode, seconds pg_ctl took)

    # --- lifecycle ---------------------------------------------------------------------------------------

    def __enter__(self) -> "ThrowawayPostgres":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "server.log"

    @property
    def socket_dir(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "socket"

    def start(self) -> None:
        if self.root is None:
            self._init()
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.log_file), "-o", self._server_options())

    def restart(self, mode: str = "fast", *, downtime: float = 0.0) -> float:
        """Stop the server (`fast`, `immediate` or `smart`), stay down `downtime` seconds (connections are
        refused meanwhile), start it again; return how long it was away."""
        began = time.monotonic()
        self._pg_ctl("stop", "-m", mode, "-w", "-t", "60")
        time.sleep(downtime)
        self.start()
        took = time.monotonic() - began
        self.restarts.append((mode, took))
        return took

    def relocate(self, host: str, port: int, *, mode: str = "fast", downtime: float = 0.0) -> float:
        """A failover to another address: stop the server (`mode`), stay down `downtime` seconds, start the
        same data directory listening on `host`:`port` only (a loopback address such as 127.0.0.2); return
        how long it was away. Clients that only know the old address can no longer reach it."""
        began = time.monotonic()
        self._pg_ctl("stop", "-m", mode, "-w", "-t", "60")
        time.sleep(downtime)
        self.host, self.port = host, port
        self.start()
        took = time.monotonic() - began
        self.restarts.append((f"relocate {mode}", took))
        return took

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", "-m", mode, "-w", "-t", "60", check=False)

    def destroy(self) -> None:
        """Stop the server (immediately: its data is thrown away) and delete its directory."""
        if self.root is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    # --- use ---------------------------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@{self.host}:{self.port}/{dbname}"

    def create_database(self, name: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(host=self.host, port=self.port, user="postgres", dbname="postgres", autocommit=True) as c:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def log_tail(self, lines: int = 40) -> str:
        if self.root is None or not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    # --- internals ---------------------------------------------------------------------------------------

    def _init(self) -> None:
        # Not under pytest's tmp_path: that is private to root (0700), and the server runs as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="weave-pg-"))
        self.root.chmod(0o755)
        self.data_dir.mkdir()
        self.socket_dir.mkdir()
        self.log_file.touch()
        if os.geteuid() == 0:
            for path in (self.data_dir, self.socket_dir, self.log_file):
                shutil.chown(path, user="postgres", group="postgres")
        self.data_dir.chmod(0o700)
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        # The whole loopback range (initdb trusts 127.0.0.1 only): a server relocated to 127.0.0.2 sees its
        # clients come from there.
        lines = ["host all all 127.0.0.0/8 trust"]
        if self.also_listen:
            lines += [f"host all all {address.rsplit('.', 1)[0]}.0/24 trust" for address in self.also_listen]
        with (self.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write("\n".join(lines) + "\n")

    def _server_options(self) -> str:
        assert self.root is not None
        # Its own socket directory and port, TCP on loopback only; fsync off: the data is thrown away, and a
        # crash of this server (-m immediate) is still a real crash for every session connected to it.
        addresses = ",".join((self.host, *self.also_listen))
        return (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses={addresses} -c fsync=off -c max_connections=200"
        )

    def _pg_ctl(self, *args: str, check: bool = True) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), *args, check=check)

    def _run(self, binary: str, *args: str, check: bool = True) -> None:
        command = [str(self.bin_dir / binary), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd="/", timeout=120)  # noqa: S603 (our args)
        if check and done.returncode != 0:
            raise RuntimeError(f"{binary} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


@contextmanager
def default_database_on(server: ThrowawayPostgres, dbname: str) -> Iterator[None]:
    """Point this process's `default` database alias at `dbname` on `server` until the block ends.

    For tests and the chaos run: everything this process does through the ORM then happens on the
    throwaway server (migrate it first). The alias's settings are restored afterwards.
    """
    from django.db import connections

    conn = connections["default"]
    settings_dict = conn.settings_dict
    saved = dict(settings_dict)
    conn.close()
    # In place: the connection wrapper reads this dict each time it connects.
    settings_dict.update(HOST=server.host, PORT=str(server.port), NAME=dbname, USER="postgres", PASSWORD="")
    try:
        yield
    finally:
        conn.close()
        settings_dict.clear()
        settings_dict.update(saved)
