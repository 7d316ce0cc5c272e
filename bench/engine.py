"""Bench: the engine's public paths side by side, each through its own worker processes, on PostgreSQL.

    make bench-ox-venv   # once: bench/.venv-ox (django-ox needs Python >= 3.12)
    export BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/weave_bench
    .venv/bin/python bench/engine.py [N] [--rounds R] [--only weave,weave-jobs,django-tasks-db,django-ox]

Systems, two worker processes each, started before and stopped after each of their rounds:

- `weave`: trivial `django.tasks` tasks on `weave.tasks.WeaveBackend`, run by `manage.py qcluster`
  with 2 workers (the engine's batch drain);
- `weave-jobs`: a site's own no-op job type (`@job(NoopJob)`, bench/noop_jobs) on the same qcluster;
- `django-tasks-db`: `manage.py db_worker --backend db` twice (poll interval 0.1 s);
- `django-ox`: `ox_worker` twice (poll interval 0.1 s), in its own venv and database (bench/ox_side.py).

The anchors' workers run with `--verbosity 0`: by default both log two lines per task, which
Weave's qcluster does not (the framework's `django_tasks` logger is left at WARNING there).

A round enqueues N in one transaction in the caller's process (the hand-over, timed per item), then
waits for all N to finish. Throughput is N over the time from the commit to the last finish, both
stored times. CPU per 1,000 is the workers' (their process groups, every process, reaped children
included) and PostgreSQL's (the server backends connected to that system's database, sampled every
0.1 s), over the round. Rounds interleave, rotating the order; the report gives medians and the
ratios of medians. Each system's workers first run a warm-up of 200 untimed.

Each round also times the push hand-over beside them: N `notification_send_to_user` calls (users with
one device each) in one transaction, in this process, as the tasks' enqueue is timed (no push is sent:
no cluster serves the push queue here). Its time per item is reported against django-ox's enqueue.

`--handover-from DIR` also times the push hand-over of another checkout of Weave (say, the code before a
change, in a `git worktree`), in a child process on the same database, in every round beside this one's
(the two take turns going first), so a before and an after are compared in the same run.

`--stall` adds the stall story of the batch drain: a drain process stops (SIGSTOP) inside a task
past its lease, another drain takes the task over and writes, then the first is let go and writes.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.engine_settings")
os.environ.setdefault("STALE_LEASE_TTL", "30")  # the throughput runs' lease, every system's
if os.environ.get("BENCH_DATABASE_URL"):
    os.environ["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.db.models import Max  # noqa: E402
from django_q.models import OrmQ  # noqa: E402
from django_tasks_db.models import DBTaskResult  # noqa: E402

from bench import stale_tasks  # noqa: E402
from bench.noop_jobs.models import NoopJob  # noqa: E402
from bench.stale_writes import OX_PYTHON, OX_SIDE, ox_database_url  # noqa: E402
from tools.processes import Child, ProcessGroups, stat_fields  # noqa: E402
from weave.jobs import enqueue_job  # noqa: E402
from weave.models import JobAttempt, TaskRow  # noqa: E402

SYSTEMS = ["weave", "weave-jobs", "django-tasks-db", "django-ox"]
WARM_UP = 200
LOGS = Path(tempfile.mkdtemp(prefix="bench-engine-"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- CPU ------------------------------------------------------------------------------------------


def _tree_cpu(fields: list[str]) -> float:
    # utime + stime + the reaped children's cutime + cstime (a recycled worker's CPU stays counted).
    return sum(int(value) for value in fields[11:15]) / CLK_TCK


def workers_cpu(children: list[Child]) -> float:
    total = 0.0
    for child in children:
        for pid in [child.pgid, *child.descendants()]:
            if (fields := stat_fields(pid)) is not None:
                total += _tree_cpu(fields)
    return total


class PostgresCpu:
    """CPU of the server backends connected to database `name`, sampled until stopped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.name])
            return [row[0] for row in cursor.fetchall()]

    def _sample(self, baseline: bool) -> None:
        for pid in self._pids():
            fields = stat_fields(pid)
            if fields is None:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
            self.first.setdefault(pid, cpu if baseline else 0.0)
            self.last[pid] = cpu

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.1):
                self._sample(baseline=False)
        finally:
            connection.close()

    def __enter__(self) -> "PostgresCpu":
        self._sample(baseline=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(baseline=False)

    @property
    def seconds(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


# --- the systems ------------------------------------------------------------------------------------


def _wait(predicate: Callable[[], bool], what: str, children: list[Child], timeout: float = 600) -> None:
    ends = time.monotonic() + timeout
    while not predicate():
        for child in children:
            assert child.alive(), f"{child.name} died:\n{child.log_tail()}"
        assert time.monotonic() < ends, f"timed out waiting for {what}"
        time.sleep(0.05)


def _db_now() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        return float(cursor.fetchone()[0])


def _bench_env() -> dict[str, str]:
    return {"DJANGO_SETTINGS_MODULE": "bench.engine_settings", "DATABASE_URL": os.environ["DATABASE_URL"]}


class Weave:
    name = "weave"
    database = property(lambda self: connection.settings_dict["NAME"])

    def start(self, groups: ProcessGroups) -> list[Child]:
        OrmQ.objects.all().delete()
        env = {**_bench_env(), "WEAVE_Q_WORKERS": "2"}
        cluster = groups.manage(f"{self.name}-qcluster", "qcluster", env=env)
        _wait(lambda: "running." in cluster.log_tail(200), "qcluster to start", [cluster])
        return [cluster]

    def round(self, n: int, children: list[Child]) -> dict[str, Any]:
        TaskRow.objects.all().delete()
        JobAttempt.objects.filter(job_type="task").delete()
        started = time.perf_counter()
        with transaction.atomic():
            for _ in range(n):
                stale_tasks.weave_noop.enqueue()
            enqueued = time.perf_counter() - started
        committed_at = _db_now()
        _wait(lambda: TaskRow.objects.filter(state="done").count() >= n, "the tasks", children)
        last = TaskRow.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
        return {"enqueue_seconds": enqueued, "seconds": last - committed_at}


class WeaveJobs(Weave):
    name = "weave-jobs"

    def round(self, n: int, children: list[Child]) -> dict[str, Any]:
        NoopJob.objects.all().delete()
        JobAttempt.objects.filter(job_type="noopjob").delete()
        started = time.perf_counter()
        with transaction.atomic():
            made = NoopJob.objects.bulk_create(NoopJob() for _ in range(n))
            enqueued = time.perf_counter() - started
            transaction.on_commit(lambda: enqueue_job("noopjob", made[0].pk))  # "start at once", as documented
        committed_at = _db_now()
        _wait(lambda: NoopJob.objects.filter(state="done").count() >= n, "the jobs", children)
        last = NoopJob.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
        return {"enqueue_seconds": enqueued, "seconds": last - committed_at}


class TasksDb:
    name = "django-tasks-db"
    database = property(lambda self: connection.settings_dict["NAME"])

    def start(self, groups: ProcessGroups) -> list[Child]:
        command = ["db_worker", "--backend", "db", "--interval", "0.1", "--no-startup-delay", "--verbosity", "0"]
        return [groups.manage(f"db-worker-{i}", *command, "--worker-id", f"w{i}", env=_bench_env()) for i in range(2)]

    def round(self, n: int, children: list[Child]) -> dict[str, Any]:
        DBTaskResult.objects.all().delete()
        started = time.perf_counter()
        with transaction.atomic():
            for _ in range(n):
                stale_tasks.db_noop.enqueue()
            enqueued = time.perf_counter() - started
        committed_at = _db_now()
        _wait(lambda: DBTaskResult.objects.filter(status="SUCCESSFUL").count() >= n, "the tasks", children)
        last = DBTaskResult.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
        return {"enqueue_seconds": enqueued, "seconds": last - committed_at}


class Ox:
    name = "django-ox"

    def __init__(self) -> None:
        self.url = ox_database_url()
        self.database = self.url.rsplit("/", 1)[1]
        self.env = {
            "OX_DATABASE_URL": self.url,
            "STALE_LEASE_TTL": os.environ["STALE_LEASE_TTL"],
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "bench.ox_settings",
        }
        self._side("reset")

    def _side(self, *args: object) -> dict[str, Any]:
        env = {**os.environ, **self.env}
        done = subprocess.run([str(OX_PYTHON), str(OX_SIDE), *map(str, args)], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"bench/ox_side.py {args} failed:\n{done.stderr[-4000:]}")
        out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return out

    def start(self, groups: ProcessGroups) -> list[Child]:
        command = [str(OX_PYTHON), "-m", "django", "ox_worker", "--interval", "0.1", "--verbosity", "0"]
        return [groups.start(f"ox-worker-{i}", command, env=self.env) for i in range(2)]

    def round(self, n: int, children: list[Child]) -> dict[str, Any]:
        return self._side("round", n)


# --- rounds -----------------------------------------------------------------------------------------


def run_round(system: Any, n: int) -> dict[str, Any]:
    with ProcessGroups(log_dir=LOGS) as groups:
        children = system.start(groups)
        system.round(WARM_UP, children)
        load = os.getloadavg()[0]
        workers_before = workers_cpu(children)
        with PostgresCpu(system.database) as pg:
            out = system.round(n, children)
        workers = workers_cpu(children) - workers_before
        groups.stop_many(children)
    out.update(
        n=n,
        rate=n / out["seconds"],
        enqueue_ms_per_item=out["enqueue_seconds"] * 1000 / n,
        worker_cpu_per_1000=workers * 1000 / n,
        postgres_cpu_per_1000=pg.seconds * 1000 / n,
        load_before=load,
        load_after=os.getloadavg()[0],
    )
    return out


def push_handover(n: int) -> dict[str, float]:
    """N `notification_send_to_user` calls in one transaction: the caller's wall time per item, inside the
    transaction (as the enqueues above) and with its commit (the drain request is made there)."""
    from django.contrib.auth import get_user_model

    from notifications.models import Device, Notification
    from notifications.services import notification_send_to_user

    user_model = get_user_model()
    Notification.objects.all().delete()
    Device.objects.all().delete()
    user_model.objects.filter(username__startswith="handover-").delete()
    people = user_model.objects.bulk_create([user_model(username=f"handover-{i}") for i in range(n)])
    Device.objects.bulk_create([Device(user=u, backend="default", token=f"hd-{u.pk}") for u in people])
    started = time.perf_counter()
    with transaction.atomic():
        for person in people:
            notification_send_to_user(user=person, title="hand-over", body="")
        inside = time.perf_counter() - started
    committed = time.perf_counter() - started
    assert Notification.objects.count() == n
    return {"enqueue_ms_per_item": inside * 1000 / n, "with_commit_ms_per_item": committed * 1000 / n}


def push_handover_elsewhere(root: str, n: int) -> dict[str, float]:
    """`push_handover(n)` run by the checkout at `root` (its own code and its bench), in a child process,
    after a warm-up of its own as this process's connection has had (its statements prepared)."""
    code = (
        "import json; from bench import engine; engine.push_handover(200); "
        f"print(json.dumps(engine.push_handover({int(n)})))"
    )
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the hand-over of {root} failed:\n{done.stderr[-4000:]}")
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _commit_of(root: str) -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    return head.stdout.strip()


def stall_story() -> dict[str, Any]:
    """A batch drain process stops inside a task past its lease; another takes over; the first wakes and writes."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_ledger (id serial PRIMARY KEY, tag text, writer text)")
        cursor.execute("DELETE FROM bench_ledger WHERE tag = 'batch'")
    TaskRow.objects.all().delete()
    stale_tasks.weave_stall_write.enqueue("batch")
    here = Path(tempfile.mkdtemp(prefix="bench-stall-"))
    env = {**_bench_env(), "STALE_LEASE_TTL": "1.0", "BENCH_STALL_DIR": str(here)}
    drain = [
        sys.executable,
        "-c",
        "import django; django.setup(); from weave.tasks.worker import drain; print(drain())",
    ]
    with ProcessGroups(log_dir=LOGS) as groups:
        stale = groups.start("stall-stale", drain, env={**env, "BENCH_WRITER": "stale"})
        _wait(lambda: (here / "stalled").exists(), "the stale drain to enter its task", [stale], timeout=60)
        stale.signal(signal.SIGSTOP)  # every thread stops: the batch's heartbeat too
        time.sleep(1.0 + 0.5)
        fresh = groups.start("stall-fresh", drain, env={**env, "BENCH_WRITER": "fresh"})
        fresh.popen.wait(60)
        (here / "resume").touch()
        stale.signal(signal.SIGCONT)
        stale.popen.wait(60)
        stale_log = stale.log_tail(20)
    with connection.cursor() as cursor:
        cursor.execute("SELECT writer FROM bench_ledger WHERE tag = 'batch' ORDER BY id")
        writes = [row[0] for row in cursor.fetchall()]
    row = TaskRow.objects.get()
    attempts = list(JobAttempt.objects.filter(job_type="task", job_id=str(row.pk)).order_by("number"))
    return {
        "writes": writes,
        "stale_writes": writes.count("stale"),
        "state": row.state,
        "attempts": [(a.owner.split(":")[0], a.outcome) for a in attempts],
        "stale_drain": stale_log.strip().splitlines()[-1:] if stale_log else [],
    }


# --- report ---------------------------------------------------------------------------------------


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def report(
    runs: dict[str, list[dict[str, Any]]],
    n: int,
    rounds: int,
    head: str,
    started_at: datetime,
    pushes: list[dict[str, float]],
    elsewhere: tuple[str, list[dict[str, float]]] | None = None,
) -> str:
    lines = [
        f"Commit {head}, {started_at:%Y-%m-%d %H:%M} UTC, N = {n}, {rounds} round(s), 2 worker processes per "
        f"system, {os.cpu_count()} CPUs. Medians over rounds (each round's figure in brackets).",
        "",
        "| system | per second | enqueue ms per item | worker CPU s per 1,000 | PostgreSQL CPU s per 1,000 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, these in runs.items():
        each = ", ".join(f"{r['rate']:.0f}" for r in these)
        lines.append(
            f"| {name} | {_median(these, 'rate'):.0f} ({each}) | {_median(these, 'enqueue_ms_per_item'):.3f} | "
            f"{_median(these, 'worker_cpu_per_1000'):.2f} | {_median(these, 'postgres_cpu_per_1000'):.2f} |"
        )
    if "weave" in runs:
        lines.append("")
        for other in ("django-tasks-db", "django-ox"):
            if other in runs:
                rate = _median(runs["weave"], "rate") / _median(runs[other], "rate")
                enqueue = _median(runs["weave"], "enqueue_ms_per_item") / _median(runs[other], "enqueue_ms_per_item")
                lines.append(
                    f"- weave / {other}: {rate:.2f}x the tasks per second; enqueue time per item {enqueue:.2f}x"
                )
    if pushes:
        each = ", ".join(f"{p['enqueue_ms_per_item']:.3f}" for p in pushes)
        line = (
            f"- the push hand-over (`notification_send_to_user`, one device, {n} calls in one transaction): "
            f"{_median(pushes, 'enqueue_ms_per_item'):.3f} ms per item ({each}), "
            f"{_median(pushes, 'with_commit_ms_per_item'):.3f} ms with the commit"
        )
        if "django-ox" in runs:
            ratio = _median(pushes, "enqueue_ms_per_item") / _median(runs["django-ox"], "enqueue_ms_per_item")
            line += f"; {ratio:.2f}x django-ox's enqueue time per item"
        lines.append(line)
    if elsewhere is not None and elsewhere[1]:
        root, theirs = elsewhere
        each = ", ".join(f"{p['enqueue_ms_per_item']:.3f}" for p in theirs)
        line = (
            f"- the same hand-over by {root} (commit {_commit_of(root)}), in the same rounds: "
            f"{_median(theirs, 'enqueue_ms_per_item'):.3f} ms per item ({each}), "
            f"{_median(theirs, 'with_commit_ms_per_item'):.3f} ms with the commit"
        )
        if "django-ox" in runs:
            ratio = _median(theirs, "enqueue_ms_per_item") / _median(runs["django-ox"], "enqueue_ms_per_item")
            line += f"; {ratio:.2f}x django-ox's enqueue time per item"
        lines.append(line)
    loads = [r["load_before"] for these in runs.values() for r in these]
    lines.append(f"\nLoad average (1 min) before the rounds: {min(loads):.1f} to {max(loads):.1f}.")
    return "\n".join(lines)


def main() -> None:
    args = sys.argv[1:]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 3
    only = args[args.index("--only") + 1].split(",") if "--only" in args else SYSTEMS
    other = args[args.index("--handover-from") + 1] if "--handover-from" in args else None
    valued = {"--rounds", "--only", "--handover-from"}
    positional = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] not in valued)]
    n = int(positional[0]) if positional else 3000
    started_at, head = datetime.now(UTC), _commit()
    call_command("migrate", verbosity=0)
    stall = stall_story() if "--stall" in args else None
    makers: dict[str, Callable[[], Any]] = {"weave": Weave, "weave-jobs": WeaveJobs, "django-tasks-db": TasksDb}
    if OX_PYTHON.exists():
        makers["django-ox"] = Ox
    systems = {name: makers[name]() for name in only if name in makers}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    names = list(systems)
    pushes: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    push_handover(WARM_UP)  # this process's statements prepared, as the other checkout's child warms up its own
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            run = run_round(systems[name], n)
            runs[name].append(run)
            print(f"round {i + 1}: {name} {run['rate']:.0f}/s (load {run['load_before']:.1f})", file=sys.stderr)
        if other is not None and i % 2:
            theirs.append(push_handover_elsewhere(other, n))
        pushes.append(push_handover(n))
        if other is not None and not i % 2:
            theirs.append(push_handover_elsewhere(other, n))
    print(report(runs, n, rounds, head, started_at, pushes, (other, theirs) if other else None))
    if stall is not None:
        print(f"\nStall story (batch drain, 1 s lease): {json.dumps(stall)}")
    print(
        "\n"
        + json.dumps({"runs": runs, "pushes": pushes, "pushes_elsewhere": theirs, "stall": stall, "logs": str(LOGS)})
    )


if __name__ == "__main__":
    main()
