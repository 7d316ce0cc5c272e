"""Start real processes (qcluster, fake servers) each in its own process group, and stop them all.

Each child gets its own session (`start_new_session=True`), so a signal to its process group id
reaches the child and every process it forked — a qcluster's workers included — like stopping a
whole host. `ProcessGroups` stops everything it started on every exit path: normal exit, an
exception, Ctrl-C, or interpreter shutdown.

A process that is killed outright (SIGKILL, the OOM killer) runs none of that, so two more things tie
the children to it: each child started from the main thread asks the kernel for SIGKILL when its parent
dies (`PR_SET_PDEATHSIG`), and a small reaper process (`_Reaper`) holds a pipe from this one and
SIGKILLs every process group still registered once the pipe closes, which it does when this process
dies however it dies. The reaper reaches the grandchildren too (a qcluster's workers), which the
parent-death signal cannot.
"""

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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


PR_SET_PDEATHSIG = 1  # prctl(2)
# Looked up here, never in a forked child: loading a library there could wait on a lock another thread held.
_prctl = ctypes.CDLL(None, use_errno=True).prctl

# The reaper: reads "+pgid" / "-pgid" lines while its parent lives; at EOF (the parent is gone, or done)
# it SIGKILLs every group still listed. It runs in a session of its own, so Ctrl-C to the terminal's
# foreground group never reaches it.
_REAPER = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    sign, pgid = line[:1], int(line[1:])
    (groups.add if sign == "+" else groups.discard)(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


class _Reaper:
    """One reaper process per test process, started on first use, told of every group started and stopped."""

    _lock = threading.Lock()
    _process: "subprocess.Popen[str] | None" = None
    _owner = 0

    @classmethod
    def tell(cls, line: str) -> None:
        with cls._lock:
            if cls._process is None or cls._owner != os.getpid() or cls._process.poll() is not None:
                cls._process = subprocess.Popen(
                    [sys.executable, "-c", _REAPER], stdin=subprocess.PIPE, text=True, start_new_session=True
                )
                cls._owner = os.getpid()  # a forked copy of this process starts its own
            assert cls._process.stdin is not None
            try:
                cls._process.stdin.write(line + "\n")
                cls._process.stdin.flush()
            except OSError:
                cls._process = None


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A preexec_fn: SIGKILL this child when the thread that started it dies (Linux `PR_SET_PDEATHSIG`)."""

    def arm() -> None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


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
        # The parent-death signal follows the thread that forks, so only a child of the main thread gets it
        # (a helper thread that ends would take its child with it); the reaper covers every child.
        main = threading.current_thread() is threading.main_thread()
        popen = subprocess.Popen(
            list(args),
            cwd=cwd or PROJECT_ROOT,
            env={**os.environ, **(env or {})},
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()) if main else None,
        )
        _Reaper.tell(f"+{popen.pid}")
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
            self.kill(child)

    def kill(self, child: Child) -> None:
        """SIGKILL the whole group at once: a crashed host."""
        child.signal(signal.SIGKILL)
        try:
            child.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return
        _Reaper.tell(f"-{child.pgid}")  # gone: its group id may be handed to another process from now on

    def stop_all(self) -> None:
        running = [child for child in reversed(self.children) if child.alive() or child.descendants()]
        if running:
            self.stop_many(running, grace=5.0)
        for child in self.children:
            if child not in running and not child.alive():
                _Reaper.tell(f"-{child.pgid}")  # ended by itself: nothing of it left for the reaper to kill
        self.children = [c for c in self.children if c.alive()]


def wait_until(predicate, *, timeout: float, interval: float = 0.1, message: str = "condition") -> None:
    """Poll `predicate` until it is true; raise TimeoutError naming `message` if it never is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"Timed out after {timeout:.0f} s waiting for {message}.")
