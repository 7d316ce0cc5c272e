"""Run Debian's pgbouncer in front of a PostgreSQL server, on a free local port, with a generated config.

For tests and the chaos kit: `with PgBouncer(upstream_port=5432) as bouncer: bouncer.url(dbname)`.
pgbouncer refuses to run as root, so as root it is started with `-u postgres` and its files live in a
directory that user can read.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

CONFIG = """\
[databases]
* = host={upstream_host} port={upstream_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 500
; libpq's `options` carries the workers' session limits (weave.worker_db); transaction pooling cannot
; honour per-client startup settings, so it is ignored here (set them on the role instead).
ignore_startup_parameters = extra_float_digits,options
server_reset_query =
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


def available() -> bool:
    return shutil.which("pgbouncer") is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """A pgbouncer process in `pool_mode` (transaction by default) in front of upstream_host:upstream_port."""

    def __init__(
        self,
        *,
        upstream_host: str = "127.0.0.1",
        upstream_port: int = 5432,
        pool_mode: str = "transaction",
        pool_size: int = 10,
        user: str = "postgres",
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.pool_mode, self.pool_size, self.user = pool_mode, pool_size, user
        self.port = 0
        self.directory = Path()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, dbname: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> "PgBouncer":
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="weave-pgbouncer-"))
        (self.directory / "userlist.txt").write_text(f'"{self.user}" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            CONFIG.format(
                upstream_host=self.upstream[0],
                upstream_port=self.upstream[1],
                port=self.port,
                directory=self.directory,
                pool_mode=self.pool_mode,
                pool_size=self.pool_size,
            )
        )
        command = ["pgbouncer", str(config)]
        if os.geteuid() == 0:
            shutil.chown(self.directory, user="postgres")
            for path in self.directory.iterdir():
                shutil.chown(path, user="postgres")
            command = ["pgbouncer", "-u", "postgres", str(config)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited ({self.process.returncode}):\n{self.log()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(f"pgbouncer did not listen on {self.port}:\n{self.log()[-2000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
