"""A throwaway PostgreSQL cluster on a free local port, for tests that restart the server.

`with ThrowawayPostgres() as pg: pg.url("weave"); pg.restart("fast")`. Built with the newest
/usr/lib/postgresql/*/bin. initdb refuses to run as root, so as root every command runs as the
`postgres` system user and the data directory belongs to it.
"""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    return Path(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayPostgres:
    def __init__(self, *, max_connections: int = 100) -> None:
        self.bin = bin_dir()
        self.max_connections = max_connections
        self.port = 0
        self.directory = Path()

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *command], check=check, capture_output=True, text=True, timeout=120)

    def _ctl(self, *args: str) -> None:
        assert self.bin is not None
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.directory / "data"), *args)

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def __enter__(self) -> "ThrowawayPostgres":
        if self.bin is None:
            raise RuntimeError("no /usr/lib/postgresql/*/bin on this machine")
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="weave-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.directory, user="postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.directory / "data"), "-U", "postgres", "--auth=trust")
        self.start()
        return self

    def _options(self) -> str:
        return f"-h 127.0.0.1 -p {self.port} -k {self.directory} -c max_connections={self.max_connections}"

    def start(self) -> None:
        self._ctl("-l", str(self.directory / "log"), "-w", "-o", self._options(), "start")

    def stop(self, mode: str = "fast") -> None:
        """`fast` ends sessions and checkpoints; `immediate` is a crash (recovery at the next start)."""
        self._ctl("-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast", *, down_for: float = 0.0) -> None:
        self.stop(mode)
        time.sleep(down_for)
        self.start()

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        assert self.bin is not None
        done = self._run(
            str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-d", dbname, "-AtX", "-c", sql
        )
        return done.stdout.strip()

    def __exit__(self, *exc: object) -> None:
        if self.bin is not None and (self.directory / "data").exists():
            self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.directory / "data"), "-m", "immediate", "stop", check=False
            )
        shutil.rmtree(self.directory, ignore_errors=True)
