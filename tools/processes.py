"""Start real processes (qcluster, fake servers) each in its own process group, and stop them all.

Each child gets its own session (`start_new_session=True`), so a signal to its process group id
reaches the child and every process it forked — a qcluster's workers included — like stopping a
whole host. `ProcessGroups` stops everything it started on every exit path: normal exit, an
exception, Ctrl-C, or interpreter shutdown.
"""

import atexit
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None once the process is gone.

    The command name is in parentheses and may itself hold spaces or parentheses, so the fields start
    after the last ")". Index 0 is the state (field 3 in proc(5)), 1 the parent, 2 the process group,
    11 and 12 the user and system CPU in clock ticks."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def process_group(pid: int | str) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[2])


def cpu_seconds(fields: list[str]) -> float:
    """User plus system CPU seconds from `stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_by_pid(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds (user + system) so far of each live pid in `pids`; a pid already gone is left out."""
    out = {}
    for pid in pids:
        if (fields := stat_fields(pid)) is not None:
            out[pid] = cpu_seconds(fields)
    return out


def process_cpu(pid: int | str = "self") -> float:
    """User plus system CPU seconds of process `pid` so far (every thread); ProcessLookupError once it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        raise ProcessLookupError(pid)
    return cpu_seconds(fields)


@dataclass
class Child:
    name: str
    popen: subprocess.Popen
    log_path: Path | None = None
    stopped_pids: list[int] = field(default_factory=list)

    @property
    def pgid(self) -> int:
        return self.popen.pid  # the session leader's pid is its process group id

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        """Send `sig` to the whole process group."""
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass

    def descendants(self) -> list[int]:
        """Return the pids in this child's process group other than the leader (Linux /proc)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != self.pgid and process_group(entry.name) == self.pgid:
                pids.append(int(entry.name))
        return sorted(pids)

    def cpu(self) -> float:
        """CPU seconds used so far by the processes alive in this child's group (the leader and the rest)."""
        return sum(cpu_by_pid([self.pgid, *self.descendants()]).values())

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class ProcessGroups:
    """A set of children, each in its own process group, stopped together."""

    def __init__(self, log_dir: Path | None = None) -> None:
        self.children: list[Child] = []
        self.log_dir = log_dir
        atexit.register(self.stop_all)

    def __enter__(self) -> "ProcessGroups":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(
        self, name: str, args: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> Child:
        log_path = None
        stdout: int | IO[bytes] = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{name}.log"
            stdout = log_path.open("ab")
        popen = subprocess.Popen(
            list(args),
            cwd=cwd or PROJECT_ROOT,
            env={**os.environ, **(env or {})},
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child = Child(name=name, popen=popen, log_path=log_path)
        self.children.append(child)
        return child

    def manage(self, name: str, *command: str, env: dict[str, str] | None = None) -> Child:
        """Start `python manage.py <command>` with this interpreter."""
        return self.start(name, [sys.executable, str(PROJECT_ROOT / "manage.py"), *command], env=env)

    def stop(self, child: Child, *, grace: float = 10.0) -> None:
        """SIGTERM the group, wait up to `grace` seconds, then SIGKILL whatever is left."""
        self.stop_many([child], grace=grace)

    def stop_many(self, children: Sequence[Child], *, grace: float = 10.0) -> None:
        """Stop several groups at once: one shared grace period, not one per child."""
        for child in children:
            child.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(child.alive() for child in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        for child in children:
            child.signal(signal.SIGKILL)
            try:
                child.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def kill(self, child: Child) -> None:
        """SIGKILL the whole group at once: a crashed host."""
        child.signal(signal.SIGKILL)
        try:
            child.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self) -> None:
        running = [child for child in reversed(self.children) if child.alive() or child.descendants()]
        if running:
            self.stop_many(running, grace=5.0)
        self.children = [c for c in self.children if c.alive()]


def wait_until(predicate, *, timeout: float, interval: float = 0.1, message: str = "condition") -> None:
    """Poll `predicate` until it is true; raise TimeoutError naming `message` if it never is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"Timed out after {timeout:.0f} s waiting for {message}.")
