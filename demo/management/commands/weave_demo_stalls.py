"""`manage.py weave_demo_stalls`: now and then freeze the qcluster worker holding an onboarding run
or a batch of notifications.

The demo's answer to "the blocked view is always empty". Stalls alternate between the two kinds of
job, an onboarding run first:

- **A run**: it picks a run under a live lease whose holder runs on this host, freezes that worker
  process (SIGSTOP) until the lease has run out by the database clock, enqueues the run for another
  worker (what the minute sweep would do, only sooner), waits until that worker has claimed it under
  a new fence, and thaws the first one (SIGCONT). The thawed worker's next renewal or save is
  refused, and it records its attempt as `blocked` with the reason.
- **Notifications**: it queues a few notifications to demo phones and freezes the worker that claims
  them. The dashboard names the stuck lease (its renewal is overdue) and then the expired one; the
  due-time watcher of another worker takes the rows over at the lease's end, and the thawed worker's
  answers are refused (`lease_lost` attempts).

Demo only: it signals processes of this machine's own qcluster, and only ones that hold a job.
"""

import os
import random
import signal
import socket
import sqlite3
import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection, transaction

from onboarding import queue
from onboarding.models import OnboardingRun
from weave.conf import weave_settings

HOST = socket.gethostname()


def _pid(owner: str) -> int | None:
    """The worker pid from an owner name `host:pid:tag` (see weave.leases.new_owner), on this host only."""
    parts = owner.split(":")
    if len(parts) < 3 or parts[-3] != HOST or not parts[-2].isdigit():
        return None
    return int(parts[-2])


def _client_ports(pid: int) -> list[int]:
    """The local TCP ports of the sockets process `pid` holds (its database connections among them).

    Read from /proc: the process's socket inodes, matched against the kernel's TCP tables. Empty where
    /proc is not there, or for connections over a Unix socket."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)  # the header
                for line in lines:
                    fields = line.split()
                    if fields[9] in inodes:
                        ports.append(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports


class Command(BaseCommand):
    help = "Demo fault: now and then freeze the worker holding an onboarding run so its attempt ends blocked."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--every", type=float, default=45.0, help="Mean seconds between stalls.")
        parser.add_argument("--stalls", type=int, default=0, help="Stop after this many stalls (0: run forever).")
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument(
            "--first-after",
            type=float,
            default=None,
            help="Seconds before the first stall, and between it and the second (default: random).",
        )
        parser.add_argument("--no-push", action="store_true", help="Freeze run holders only.")
        parser.add_argument("--push-only", action="store_true", help="Freeze push workers only.")

    def handle(self, *args: Any, every: float, stalls: int, seed: int | None, **options: Any) -> None:
        rng = random.Random(seed)
        done = tries = 0
        first = options["first_after"]
        while not stalls or done < stalls:
            # `--first-after` before each of the first two, so both kinds show early; then about every `every`.
            time.sleep(first if first is not None and tries < 2 else rng.uniform(0.5, 1.5) * every)
            push = options["push_only"] or (tries % 2 == 1 and not options["no_push"])
            tries += 1  # found or not, the next stall is of the other kind
            # Once due, the stall waits (polling each second, up to one more interval) for a run to be held:
            # runs take seconds, so a single look would mostly find none and the blocked view stay empty.
            deadline = time.monotonic() + every
            while time.monotonic() < deadline:
                try:
                    if self.stall_push() if push else self.stall_one():
                        done += 1
                        break
                    if push:
                        break  # its own notifications were its chance: no second batch for the same stall
                except DatabaseError as exc:
                    # A demo fault must never take the demo down: say so and try again later.
                    self.stderr.write(f"stall: skipped after a database error: {exc}")
                    break
                time.sleep(1.0)

    def stall_one(self) -> bool:
        """Freeze one run holder until another worker took the run over; return whether one was found."""
        deadline = time.monotonic() + 60  # look for a held run for at most a minute
        while time.monotonic() < deadline:
            for run in OnboardingRun.objects.live().only("pk", "owner", "fence").order_by("?")[:5]:
                pid = _pid(run.owner or "")
                if pid is not None:
                    return self._freeze(OnboardingRun, run.pk, run.fence, run.owner or "", pid)
            time.sleep(0.2)
        return False

    def stall_push(self) -> bool:
        """Queue a few notifications and freeze the worker that claims them; return whether one was caught."""
        from notifications.models import Notification
        from notifications.services import notification_create

        self.push_stalls = getattr(self, "push_stalls", 0) + 1
        from django.db import transaction

        with transaction.atomic():  # all visible at once: one worker claims them as one batch
            rows = [
                notification_create(
                    device_token=f"demo-device-stall-{self.push_stalls}-{i}",
                    title=f"Held by a frozen worker ({self.push_stalls})",
                    body="Its worker is frozen holding it: another worker takes it over once the lease runs out.",
                ).pk
                for i in range(3)
            ]
        # A send takes the fake provider's latency (150 ms): look often, or the batch is done before we see it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for row in Notification.objects.filter(pk__in=rows, owner__isnull=False).only("pk", "owner", "fence"):
                pid = _pid(row.owner or "")
                if pid is not None and self._freeze(Notification, row.pk, row.fence, row.owner or "", pid):
                    return True
                break  # let go mid-write: look again, the batch may still be held
            time.sleep(0.02)
        self.stdout.write(f"stall: notifications {rows} were sent before a worker could be caught holding them")
        return False

    def _freeze(self, model: Any, pk: int, fence: int, owner: str, pid: int) -> bool:
        run = model is OnboardingRun
        what = f"run {pk}" if run else f"notification {pk} (and the rest of its batch)"
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        try:
            if self._frozen_inside_a_transaction(model, pk, pid):
                # Frozen mid-write, it would hold its locks (on SQLite: the whole database) until thawed,
                # and nobody could take the job over. Let it go and pick another moment.
                self.stdout.write(f"stall: pid {pid} was inside a write; let go at once")
                return False
            self.stdout.write(f"stall: froze worker pid {pid} ({owner}) holding {what} at fence {fence}")
            ttl = weave_settings.ONBOARDING_LEASE_TTL if run else weave_settings.PUSH_LEASE_TTL
            # Wait past the lease; a run is then handed to another worker, as the sweep would. Notifications
            # need no help: another worker's due-time watcher wakes at the lease's end.
            time.sleep(float(ttl) + 1.0)
            if run:
                queue.enqueue_run(pk)
            taken = time.monotonic() + 60
            while not model._default_manager.filter(pk=pk).exclude(fence=fence).exists():
                if time.monotonic() > taken:
                    self.stdout.write(f"stall: nobody took {what} over within 60 s; {self._story(model, pk, pid)}")
                    break
                time.sleep(0.2)
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        ending = "end blocked" if run else "be refused (lease_lost; skipped if it had not sent them yet)"
        self.stdout.write(f"stall: thawed pid {pid}; its work at fence {fence} should {ending}")
        return True

    def _frozen_inside_a_transaction(self, model: Any, pk: int, pid: int) -> bool:
        """Whether the frozen worker holds write locks others would wait on.

        Its other rows, a wake-up slot or a receipt may be locked as well as this one: on PostgreSQL any
        open transaction of one of its connections counts, and the row itself is tried without waiting."""
        if connection.vendor == "sqlite":
            probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.5)
            try:
                probe.execute("BEGIN IMMEDIATE")  # the database's one write lock
                probe.execute("ROLLBACK")
                return False
            except sqlite3.OperationalError:
                return True
            finally:
                probe.close()
        ports = _client_ports(pid)
        if ports:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s) AND xact_start IS NOT NULL"
                    " AND pid <> pg_backend_pid()",
                    [ports],
                )
                if cursor.fetchone()[0]:
                    return True
        try:
            with transaction.atomic():
                model._default_manager.select_for_update(nowait=True).filter(pk=pk).exists()
            return False
        except DatabaseError:
            return True

    def _story(self, model: Any, pk: int, pid: int) -> str:
        """What a stall that was never taken over looked like, for whoever reads the log."""
        row = model._default_manager.filter(pk=pk).values("owner", "fence", "lease_expires_at").first()
        told = f"row {row}"
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT client_port, state, wait_event_type, left(query, 120) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
                )
                told += f"; open transactions (frozen pid's ports {_client_ports(pid)}): {cursor.fetchall()}"
        return told
