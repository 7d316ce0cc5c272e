"""The chaos run: real servers, K real qcluster process groups, load through the services, seeded faults, audit.

    outcome = ChaosRunner(ChaosConfig(notifications=300, runs=12, clusters=3)).run()
    outcome.result.violations   # [] when every invariant held
    print(outcome.report)

Every process it starts lives in `ProcessGroups`, which stops them all on every exit path (a normal
end, an exception, Ctrl-C, interpreter exit).
"""

import json
import logging
import os
import random
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import override_settings

from tools.chaos import edge as E
from tools.chaos import faults as F
from tools.chaos.audit import AuditInput, AuditResult, audit
from tools.chaos.config import ChaosConfig
from tools.chaos.load import (
    DEVICE_USER_PREFIX,
    LoadProgress,
    LoadThread,
    create_devices,
    create_suppliers,
    refused_ibans,
    sanctioned_names,
    unregistered_tax_ids,
)
from tools.chaos.report import Progress, render
from tools.partition import SilentProxy
from tools.pgserver import ThrowawayPostgres
from tools.processes import Child, ProcessGroups, wait_until
from weave.leases import default_clock


@dataclass
class ChaosOutcome:
    result: AuditResult
    report: str
    faults: list[F.FaultRecord]
    elapsed: float


def db_now() -> datetime:
    """The database clock, so fault times compare with the times the apps record."""
    return default_clock.read(connection.alias)


def _get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (our own local fake)
        return json.loads(response.read())


def _answers(url: str) -> bool:
    try:
        _get_json(url, timeout=1.0)
    except OSError:
        return False
    return True


class ChaosRunner:
    def __init__(
        self,
        config: ChaosConfig,
        *,
        stdout: TextIO = sys.stdout,
        database_url: str | None = None,
        server: ThrowawayPostgres | None = None,
    ) -> None:
        self.config = config
        # The PostgreSQL server the run may restart (pg_restart faults): one this run owns, never a shared one.
        self.server = server
        self.progress = LoadProgress()
        self.stdout = stdout
        self.database_url = database_url
        self.rng = random.Random(config.seed)
        self.groups = ProcessGroups(log_dir=config.log_dir)
        self.clusters: list[Child] = []
        self.push: Child | None = None
        self.supplier: Child | None = None
        self.records: list[F.FaultRecord] = []
        self.stopped: list[tuple[int, float, F.FaultRecord]] = []  # (pid, resume at, record)
        self.proxies: dict[str, SilentProxy] = {}  # cluster name -> its link to PostgreSQL
        self.partitioned: list[tuple[str, float, F.FaultRecord]] = []  # (cluster, heal at, record)
        self.edged: list[tuple[float, F.FaultRecord]] = []  # (switch off at, record) of edge faults on
        self.user_ids: list[int] = []  # users with devices, for the sends an HTTP/2 edge fault creates
        self._cluster_seq = 0
        self._server_seq = 0
        self._t0 = 0.0

    # --- the whole run -------------------------------------------------------------------------------

    def run(self) -> ChaosOutcome:
        """Run the load under faults, audit, and stop every process started, whatever happens."""
        previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        # This process creates the load: one log line per created job would bury the progress bar.
        quieted = [(logging.getLogger(name), logging.getLogger(name).level) for name in ("weave", "django-q")]
        for logger, _ in quieted:
            logger.setLevel(logging.WARNING)
        try:
            # Runs record the plan of the process that starts them: this one (the load thread).
            plan = {**(getattr(settings, "WEAVE", None) or {}), "ONBOARDING_STEPS": list(self.config.steps)}
            with self.groups, override_settings(WEAVE=plan):
                return self._run()
        finally:
            signal.signal(signal.SIGTERM, previous)
            for logger, level in quieted:  # the caller's (a test's) levels again
                logger.setLevel(level)
            for pid, _, _ in self.stopped:  # never leave a frozen process behind
                _signal(pid, signal.SIGCONT)
            for proxy in self.proxies.values():  # the clusters are gone by now: close their links
                proxy.close()

    def _run(self) -> ChaosOutcome:
        c = self.config
        if c.pg_restarts and self.server is None:
            raise RuntimeError("pg_restart faults need a PostgreSQL server the run controls (see tools/pgserver.py).")
        self.say(
            f"Chaos run: N={c.notifications} notifications, M={c.runs} runs, K={c.clusters} clusters, seed {c.seed}"
        )
        self._prepare_database()
        expectations = create_suppliers(c)
        self._start_servers()
        devices, user_ids = create_devices(c)
        self.user_ids = list(user_ids)
        self._ensure_schedules()
        for _ in range(c.clusters):
            self._start_cluster()
        plan = F.plan(c)
        self.say(f"Fault plan (at share of jobs finished): {', '.join(f'{f.kind}@{f.at:.0%}' for f in plan) or 'none'}")

        progress = self.progress
        if plan:
            progress.faults_due.set()
        loader = LoadThread(c, list(expectations), progress, user_ids)
        self._t0 = time.monotonic()
        loader.start()
        self._drive(plan, progress)
        self._edges_off()  # the deadline may have come with a mode still on; the stats below need plain fakes
        loader.join(timeout=5)
        if progress.error is not None:
            raise RuntimeError(f"Creating the load failed: {progress.error!r}") from progress.error
        elapsed = time.monotonic() - self._t0

        # Let the clusters finish what they hold (SIGTERM), so the audit reads a database at rest.
        self.groups.stop_many(self.clusters, grace=c.push_budget + c.push_timeout + 5)
        push_stats = _get_json(f"http://127.0.0.1:{c.push_port}/_stats", timeout=60)
        push_log = _get_json(f"http://127.0.0.1:{c.push_port}/_requests", timeout=60)["requests"]
        supplier_stats = _get_json(f"{c.supplier_url}/_stats", timeout=60)
        provider_fakes = self._push_fakes_stats() if c.devices else {}
        result = audit(
            AuditInput(
                expectations=expectations,
                push_stats=push_stats,
                push_log=push_log,
                supplier_stats=supplier_stats,
                faults=self.records,
                lease_ttl=c.lease_ttl,
                recovery_slack=5.0 + c.sweep_every,
                # Only a frozen lease holder that was thawed again can attempt (and be refused) a stale write.
                stops_planned=sum(1 for r in self.records if r.kind == F.STOP and r.held and r.thawed),
                step_tables=c.step_tables,
                devices=devices,
                provider_fakes=provider_fakes,
            )
        )
        topped_up = f", + {progress.topped_up} topped up while faults were due" if progress.topped_up else ""
        summary = {
            "size": f"N={c.notifications} notifications (+ welcome{topped_up}), M={c.runs} runs, K={c.clusters} "
            f"clusters x {c.workers} workers, seed {c.seed}",
            "timing": f"lease TTL {c.lease_ttl:g} s, push timeout {c.push_timeout:g} s, "
            f"sweep every {c.sweep_every:g} s",
            "provider faults": f"latency {c.latency_ms} ms, 5xx {c.rate_5xx:.0%}, 429 {c.rate_429:.0%} "
            f"(Retry-After {c.retry_after} s), deliver-then-hang {c.rate_hang:.1%} ({c.hang_seconds:g} s)",
            "supplier services": f"requests {supplier_stats.get('requests')}, unique keys "
            f"{supplier_stats.get('unique_keys')}, replays {supplier_stats.get('replays')}, faults "
            f"{supplier_stats.get('faults')}",
            "drained in": f"{elapsed:.1f} s (deadline {c.deadline:g} s)",
        }
        if c.devices:
            dead = sum(1 for v in devices.values() if v == "dead")
            summary["devices"] = (
                f"{len(devices)} on fcm/apns/webpush ({dead} with dead tokens), {progress.device_notifications} "
                f"notifications sent to them ({c.expiring_share:.0%} of sends with a {c.short_ttl} s TTL)"
            )
        if c.edge_faults:
            summary["provider edge"] = _edge_summary(result.figures.get("edge", {}))
        report = render(result, faults=self.records, summary=summary)
        return ChaosOutcome(result=result, report=report, faults=self.records, elapsed=elapsed)

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    # --- setup ----------------------------------------------------------------------------------------

    def _prepare_database(self) -> None:
        name = str(connection.settings_dict["NAME"])
        if connection.vendor != "postgresql":
            raise RuntimeError("The chaos run needs PostgreSQL (set DATABASE_URL=postgres://...).")
        if "chaos" not in name and "test" not in name:
            # The run empties the job tables; refuse a database that looks like someone's real one.
            raise RuntimeError(f"Refusing to empty database {name!r}: its name must contain 'chaos' or 'test'.")
        call_command("migrate", verbosity=0, interactive=False)
        from django_q.models import OrmQ, Schedule, Task

        from notifications.models import DeliveryAttempt, Device, Notification
        from onboarding.models import (
            BankAccount,
            OnboardingRun,
            PaymentTerms,
            RunAttempt,
            StepReceipt,
            Supplier,
            VendorRecord,
        )

        models = [DeliveryAttempt, Notification, Device, StepReceipt, RunAttempt, VendorRecord, PaymentTerms]
        models += [BankAccount]
        models += [apps.get_model(model) for _, model, _ in self.config.step_tables]
        models += [OnboardingRun, Supplier, OrmQ, Task, Schedule]
        tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {tables} CASCADE")
        from django.contrib.auth import get_user_model

        get_user_model().objects.filter(username__startswith=DEVICE_USER_PREFIX).delete()

    def _ensure_schedules(self) -> None:
        from weave.schedules import ensure_schedules

        ensure_schedules()

    def _server_args(self, kind: str) -> list[str]:
        c = self.config
        state = c.log_dir / f"{kind}-state.json"
        args = [sys.executable, "-m", "tools.chaos.serve", kind, "--state", str(state.resolve())]
        args += ["--port", str(c.push_port if kind == "push" else c.supplier_port)]
        latency = c.latency_ms if kind == "push" else c.supplier_latency_ms
        args += ["--latency-ms", str(latency), "--rate-5xx", str(c.rate_5xx), "--rate-429", str(c.rate_429)]
        args += ["--retry-after", str(c.retry_after), "--rate-hang", str(c.rate_hang)]
        args += ["--hang-seconds", str(c.hang_seconds), "--seed", str(c.seed + self._server_seq)]
        if kind == "supplier":
            for name in sanctioned_names(c):
                args += ["--sanctioned", name]
            for tax_id in unregistered_tax_ids(c):
                args += ["--invalid-tax-id", tax_id]
            for iban in refused_ibans(c):
                args += ["--refused-iban", iban]
        return args

    def _start_server(self, kind: str) -> Child:
        self._server_seq += 1
        child = self.groups.start(f"fake-{kind}-{self._server_seq}", self._server_args(kind))
        url = f"http://127.0.0.1:{self.config.push_port if kind == 'push' else self.config.supplier_port}/_stats"
        wait_until(lambda: _answers(url) or not child.alive(), timeout=30, message=f"the fake {kind} server")
        if not child.alive():
            raise RuntimeError(f"The fake {kind} server exited:\n{child.log_tail()}")
        return child

    def _start_servers(self) -> None:
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        # A fresh start: the fakes' stores and the children's logs belong to this run only.
        for kind in ("push", "supplier"):
            (self.config.log_dir / f"{kind}-state.json").unlink(missing_ok=True)
        for log in self.config.log_dir.glob("*.log"):
            log.unlink()
        self.push = self._start_server("push")
        self.supplier = self._start_server("supplier")
        if self.config.devices:
            self._start_push_fakes()

    def _start_push_fakes(self) -> None:
        """FCM, APNs and Web Push fakes in one child (same latency and hangs as the webhook fake); this
        process reads the PUSH_BACKENDS they write, as the workers do (WEAVE_PUSH_BACKENDS_FILE)."""
        from django.conf import settings

        c = self.config
        c.push_backends_file.unlink(missing_ok=True)
        args = [sys.executable, "manage.py", "fake_push_services", "--dir", str(c.push_fakes_dir.resolve())]
        args += ["--fcm-port", str(c.push_fakes_port), "--apns-port", str(c.push_fakes_port + 1)]
        args += ["--webpush-port", str(c.push_fakes_port + 2), "--latency-ms", str(c.latency_ms)]
        args += ["--rate-hang", str(c.rate_hang), "--hang-seconds", str(c.hang_seconds), "--seed", str(c.seed)]
        c.push_fakes_control.unlink(missing_ok=True)
        args += ["--control", str(c.push_fakes_control.resolve())]
        child = self.groups.start("fake-push-providers", args)
        wait_until(lambda: c.push_backends_file.exists() or not child.alive(), timeout=60, message="the fakes")
        if not child.alive():
            raise RuntimeError(f"The provider fakes exited:\n{child.log_tail()}")
        backends = json.loads(c.push_backends_file.read_text())
        settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_BACKENDS": backends}
        self._push_fakes_ca = backends["fcm"]["OPTIONS"]["ca_file"]

    def _push_fakes_stats(self) -> dict[str, Any]:
        import ssl

        context = ssl.create_default_context(cafile=self._push_fakes_ca)
        stats = {}
        for offset, name in enumerate(("fcm", "apns", "webpush")):
            url = f"https://127.0.0.1:{self.config.push_fakes_port + offset}/_stats"
            with urllib.request.urlopen(url, timeout=60, context=context) as response:  # noqa: S310 (our fake)
                stats[name] = json.loads(response.read())
        return stats

    def _start_cluster(self) -> Child:
        self._cluster_seq += 1
        name = f"qcluster-{self._cluster_seq}"
        env = self.config.worker_env()
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        if self.config.partitions or self.config.db_restarts:
            # Its own silent proxy, so a partition cuts this cluster off and no other.
            s = connection.settings_dict
            proxy = SilentProxy((s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432)))
            self.proxies[name] = proxy
            env["DATABASE_URL"] = proxy.url(self.database_url or _database_url())
        child = self.groups.manage(name, "qcluster", env=env)
        self.clusters.append(child)
        return child

    # --- the loop while the load drains -----------------------------------------------------------------

    def _drive(self, plan: list[F.Fault], progress: LoadProgress) -> None:
        c = self.config
        bar = Progress(self.stdout, enabled=c.progress)
        pending = list(plan)
        next_sweep = 0.0
        last_fault = -1e9
        waited_since: float | None = None
        settled_since: float | None = None
        try:
            while True:
                now = self.elapsed()
                self._resume_due(now)
                done, total = self._terminal_counts()
                share = done / max(total, c.notifications + c.runs, 1)
                if pending and pending[0].at <= share and now >= last_fault + c.fault_gap:
                    waited_since = now if waited_since is None else waited_since
                    # A kill or a stop waits (up to 15 s) for a target that holds leases.
                    if self._inject(pending[0], waited=now - waited_since):
                        pending.pop(0)
                        last_fault, waited_since = now, None
                        if not pending:
                            progress.faults_due.clear()
                if now >= next_sweep:
                    self._sweep()
                    next_sweep = now + c.sweep_every
                bar.update(
                    now,
                    done=done,
                    total=total,
                    created=progress.notifications + progress.runs,
                    faults=len(self.records),
                )
                quiet = progress.done and done == total and not self.stopped and not self.partitioned
                quiet = quiet and not self.edged
                if quiet and settled_since is None:
                    settled_since = now
                elif not quiet:
                    settled_since = None
                # Everything is finished and every frozen worker is thawed: give stale workers one TTL
                # to try (and fail) their late writes, so the audit sees their refusals.
                if settled_since is not None and now - settled_since >= c.lease_ttl:
                    break
                if now >= c.deadline or progress.error is not None:
                    break
                time.sleep(0.5)
        finally:
            progress.faults_due.clear()  # the deadline or an error: the load thread stops topping up
            bar.finish()
        for fault in pending:
            note = f"not run before the deadline or an error (due at {fault.at:.0%})"
            self.records.append(F.FaultRecord(fault.kind, self.elapsed(), None, "-", note=note))

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _terminal_counts(self) -> tuple[int, int]:
        from notifications.models import Notification
        from onboarding.models import OnboardingRun

        total = Notification.objects.count() + OnboardingRun.objects.count()
        active = Notification.objects.pending().count() + OnboardingRun.objects.active().count()
        return total - active, total

    def _sweep(self) -> None:
        """Ask for work for rows that need a worker: a fast stand-in for the once-a-minute schedules."""
        from notifications.models import Notification
        from notifications.queue import enqueue_drain
        from onboarding.services import onboarding_wake

        # Keep at most one drain per cluster running, so drains do not starve onboarding's.
        drains = Notification.objects.live().filter(owner__startswith="push:").values("owner").distinct().count()
        if drains < self.config.clusters and Notification.objects.claimable().exists():
            enqueue_drain()
        onboarding_wake()  # one request: the engine keeps one onboarding drain waiting, and each asks for helpers

    # --- faults ------------------------------------------------------------------------------------------

    def _inject(self, fault: F.Fault, *, waited: float) -> bool:
        """Inject `fault`; False means "no target yet, ask again next tick"."""
        if fault.kind == F.KILL:
            return self._kill(waited)
        if fault.kind == F.STOP:
            return self._stop(fault, waited)
        if fault.kind == F.PARTITION:
            return self._partition(waited)
        if fault.kind == F.DB_RESTART:
            return self._db_restart(waited)
        if fault.kind == F.PG_RESTART:
            return self._pg_restart(fault, waited)
        if fault.kind == F.EDGE:
            return self._edge(fault)
        self._restart()
        return True

    def _kill(self, waited: float) -> bool:
        # Prefer a cluster that holds leases: killing an idle one tells nothing about recovery.
        holders = F.lease_holders()
        frozen = {pid for pid, _, _ in self.stopped}
        # Spare clusters with a frozen worker: killing it would rob the stop of its stale write.
        alive = [c for c in self.clusters if c.alive() and not frozen & set(c.descendants())]
        alive = alive or [c for c in self.clusters if c.alive()]
        busy = [child for child in alive if any(holders.get(pid) for pid in child.descendants())]
        if not busy and waited < 15:
            return False
        child = self.rng.choice(busy or alive)
        pids = {child.pgid, *child.descendants()}
        held = F.held_rows(pids)
        record = F.FaultRecord(F.KILL, self.elapsed(), db_now(), child.name, held)
        self.groups.kill(child)
        self.clusters.remove(child)
        self._drop_proxy(child.name)
        for item in [item for item in self.stopped if item[0] in pids]:
            self.stopped.remove(item)
            item[2].note += "; its cluster was killed while it was frozen"
        replacement = self._start_cluster()
        record.note = f"SIGKILL group {child.pgid}; started {replacement.name}"
        self.records.append(record)
        return True

    def _stop(self, fault: F.Fault, waited: float) -> bool:
        # Alternate between a worker holding onboarding runs and one holding notifications, so both
        # stale-worker paths (blocked attempts, lease_lost deliveries) run; fall back to any holder.
        prefer = "run" if fault.index % 2 == 0 else "notification"
        frozen = {p for p, _, _ in self.stopped}
        workers = [pid for child in self.clusters if child.alive() for pid in child.descendants()]
        candidates = []
        for model in (prefer, None):
            holders = F.lease_holders(model)
            candidates = sorted(pid for pid in workers if holders.get(pid) and pid not in frozen)
            if candidates or waited < 8:
                break
        if not candidates:
            if waited < 15:
                return False  # nobody holds a lease this instant; look again shortly
            self.records.append(F.FaultRecord(F.STOP, self.elapsed(), None, "-", note="no worker held a lease"))
            return True
        pid = self.rng.choice(candidates)
        held = F.held_rows({pid})
        pause = self.config.stop_factor * self.config.lease_ttl
        record = F.FaultRecord(F.STOP, self.elapsed(), db_now(), f"worker pid {pid}", held)
        _signal(pid, signal.SIGSTOP)
        record.note = f"SIGSTOP for {pause:g} s (TTL {self.config.lease_ttl:g} s), then SIGCONT"
        self.stopped.append((pid, self.elapsed() + pause, record))
        self.records.append(record)
        return True

    def _partition(self, waited: float) -> bool:
        """Cut one cluster off from PostgreSQL (silently, both ways) for partition_factor x TTL."""
        holders = F.lease_holders()
        cut = {name for name, _, _ in self.partitioned}
        frozen = {pid for pid, _, _ in self.stopped}
        alive = [c for c in self.clusters if c.alive() and c.name in self.proxies and c.name not in cut]
        alive = [c for c in alive if not frozen & set(c.descendants())] or alive
        busy = [c for c in alive if any(holders.get(pid) for pid in c.descendants())]
        if not busy and waited < 15:
            return False
        if not alive:
            self.records.append(F.FaultRecord(F.PARTITION, self.elapsed(), None, "-", note="no cluster to cut off"))
            return True
        child = self.rng.choice(busy or alive)
        pause = self.config.partition_factor * self.config.lease_ttl
        held = F.held_rows({child.pgid, *child.descendants()})
        record = F.FaultRecord(F.PARTITION, self.elapsed(), db_now(), child.name, held)
        # Bounded twice: healed by _resume_due, and by the proxy itself should this loop stall.
        self.proxies[child.name].partition(max_seconds=pause + 30)
        record.note = f"silent link to PostgreSQL for {pause:g} s (TTL {self.config.lease_ttl:g} s), then healed"
        self.partitioned.append((child.name, self.elapsed() + pause, record))
        self.records.append(record)
        return True

    def _db_restart(self, waited: float) -> bool:
        """End every cluster's PostgreSQL sessions at once; reconnects fail for `db_down_seconds`."""
        holders = F.lease_holders()
        alive = [c for c in self.clusters if c.alive() and c.name in self.proxies]
        if not any(holders.get(pid) for c in alive for pid in c.descendants()) and waited < 15:
            return False  # wait until someone holds a lease: a restart with nothing in flight tells little
        pids = {pid for c in alive for pid in (c.pgid, *c.descendants())}
        record = F.FaultRecord(
            F.DB_RESTART, self.elapsed(), db_now(), "every cluster's PostgreSQL link", F.held_rows(pids)
        )
        down = self.config.db_down_seconds
        for child in alive:
            self.proxies[child.name].reset(refuse_for=down)
        record.note = f"{len(alive)} clusters' sessions ended; reconnects refused for {down:g} s"
        self.records.append(record)
        return True

    def _pg_restart(self, fault: F.Fault, waited: float) -> bool:
        """Restart the PostgreSQL server under every cluster: `-m fast` and `-m immediate` by turns."""
        assert self.server is not None
        if not F.lease_holders() and waited < 15:
            return False  # a restart while nobody holds a lease tells nothing about recovery
        mode = "fast" if fault.index % 2 == 0 else "immediate"
        downtime = self.config.pg_downtime
        # With the load thread between chunks: a web request caught by the restart is not this fault's test.
        with self.progress.db_lock:
            pids = {pid for child in self.clusters if child.alive() for pid in (child.pgid, *child.descendants())}
            record = F.FaultRecord(F.PG_RESTART, self.elapsed(), db_now(), f"PostgreSQL -m {mode}", F.held_rows(pids))
            took = self.server.restart(mode, downtime=downtime)
            connection.close()  # this process's session died with the server
            self.progress.db_epoch += 1
        record.back_at = db_now()
        record.note = f"pg_ctl stop -m {mode}, {downtime:g} s down, started again: away {took:.1f} s"
        self.records.append(record)
        return True

    def _drop_proxy(self, name: str) -> None:
        proxy = self.proxies.pop(name, None)
        if proxy is not None:
            proxy.close()
        for cut in [cut for cut in self.partitioned if cut[0] == name]:
            self.partitioned.remove(cut)
            cut[2].note += "; its cluster was killed while cut off"

    def _resume_due(self, now: float) -> None:
        for item in list(self.stopped):
            pid, resume_at, record = item
            if now >= resume_at:
                _signal(pid, signal.SIGCONT)
                record.resumed_at = now
                record.thawed = True
                self.stopped.remove(item)
        for cut in list(self.partitioned):
            name, heal_at, cut_record = cut
            if now >= heal_at:
                self.proxies[name].heal()
                cut_record.resumed_at = now
                cut_record.thawed = True
                self.partitioned.remove(cut)
        for edge in [edge for edge in self.edged if now >= edge[0]]:
            self._edge_off(edge)

    def _restart(self) -> None:
        record = F.FaultRecord(F.RESTART, self.elapsed(), db_now(), "fake push + supplier services")
        for kind in ("push", "supplier"):
            old = self.push if kind == "push" else self.supplier
            assert old is not None
            self.groups.stop(old, grace=10)
            new = self._start_server(kind)
            if kind == "push":
                self.push = new
                for _, edge in self.edged:  # a restarted fake starts plain: a window still open goes on
                    E.configure_webhook(self.config.push_port, E.WEBHOOK_MODES[edge.modes[0]])
            else:
                self.supplier = new
        record.note = "SIGTERM (state kept), started again on the same ports"
        record.resumed_at = self.elapsed()  # the fake's record of requests in this window may be cut short
        self.records.append(record)

    # --- provider-edge faults (tools/chaos/edge.py) -------------------------------------------------------

    def _edge(self, fault: F.Fault) -> bool:
        """Switch one webhook mode (and, with devices, one HTTP/2 mode) on for `edge_seconds`."""
        c = self.config
        webhook, h2 = E.modes_for(fault.index, h2=bool(c.devices))
        target = f"webhook {webhook}" + (f" + HTTP/2 {h2}" if h2 else "")
        record = F.FaultRecord(F.EDGE, self.elapsed(), db_now(), target, modes=(webhook, h2))
        E.configure_webhook(c.push_port, E.WEBHOOK_MODES[webhook])
        record.note = f"on for {c.edge_seconds:g} s, then off"
        if h2:
            if not E.configure_h2(c.push_fakes_control, E.H2_MODES[h2]):
                record.note += "; the HTTP/2 fakes did not confirm the mode"
            record.note += f"; {self._device_burst()} rows sent to devices as it began"
        self.edged.append((self.elapsed() + c.edge_seconds, record))
        self.records.append(record)
        return True

    def _device_burst(self) -> int:
        """Sends to a few users' devices, so an HTTP/2 mode meets traffic (and new connections)."""
        from django.contrib.auth import get_user_model

        from notifications.services import notification_send_to_user

        rows = 0
        users = get_user_model().objects.filter(
            pk__in=self.rng.sample(self.user_ids, min(len(self.user_ids), self.config.edge_device_sends))
        )
        for user in users:
            sent = notification_send_to_user(user=user, title="Chaos edge message", body="Sent during an edge fault.")
            rows += len(sent)
        return rows

    def _edge_off(self, edge: tuple[float, F.FaultRecord]) -> None:
        _, record = edge
        self.edged.remove(edge)
        # Off, then whatever another window still open wants on (windows may overlap).
        E.configure_webhook(self.config.push_port, E.WEBHOOK_OFF)
        for _, other in self.edged:
            E.configure_webhook(self.config.push_port, E.WEBHOOK_MODES[other.modes[0]])
        if record.modes[1]:
            wanted = {name: dict(off) for name, off in E.H2_OFF.items()}
            for _, other in self.edged:
                for name, settings in E.H2_MODES.get(other.modes[1], {}).items():
                    wanted[name].update(settings)
            E.configure_h2(self.config.push_fakes_control, wanted)
        record.resumed_at = self.elapsed()
        record.thawed = True

    def _edges_off(self) -> None:
        for edge in list(self.edged):
            self._edge_off(edge)


def _edge_summary(edge: dict[str, Any]) -> str:
    webhook, effects = edge.get("webhook", {}), edge.get("h2_effects", {})
    text = f"{edge.get('faults', 0)} edge faults; webhook modes {', '.join(edge.get('webhook_modes', [])) or '-'}"
    text += f"; HTTP/2 modes {', '.join(edge.get('h2_modes', [])) or '-'}. At the fakes: "
    text += f"{webhook.get('unsolicited_408', 0)} unsolicited 408s, {webhook.get('by_status', {}).get('202', 0)} "
    text += f"early 202s, {effects.get('refused_streams', 0)} refused streams, {effects.get('tls_stalled', 0)} "
    text += f"stalled handshakes, {effects.get('token_requests', 0)} token requests. Attempts: "
    text += f"{webhook.get('unknown', 0)} unknown and {webhook.get('nothing_sent', 0)} nothing-sent on the webhook"
    for name, counts in edge.get("h2", {}).items():
        text += f"; {name} {counts['unknown']} unknown, {counts['nothing_sent']} nothing-sent"
    return text


def _database_url() -> str:
    """A DATABASE_URL for the database this process uses (the children get it through their proxy)."""
    from urllib.parse import quote

    s = connection.settings_dict
    auth = quote(s["USER"] or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    # A SIGTERM to the runner unwinds like Ctrl-C, so every `finally` (and stop_all) runs.
    raise KeyboardInterrupt
