"""`manage.py weave_demo_stalls`: now and then freeze the qcluster worker holding an onboarding run.

The demo's answer to "the blocked view is always empty". Every so often it picks a run under a live
lease whose holder runs on this host, freezes that worker process (SIGSTOP) until the lease has run
out by the database clock, enqueues the run for another worker (what the minute sweep would do,
only sooner), waits until that worker has claimed it under a new fence, and thaws the first one
(SIGCONT). The thawed worker's next renewal or save is refused, and it records its attempt as
`blocked` with the reason: the dashboard and the run's timeline show it.

Demo only: it signals processes of this machine's own qcluster, and only ones that hold a run.
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


class Command(BaseCommand):
    help = "Demo fault: now and then freeze the worker holding an onboarding run so its attempt ends blocked."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--every", type=float, default=45.0, help="Mean seconds between stalls.")
        parser.add_argument("--stalls", type=int, default=0, help="Stop after this many stalls (0: run forever).")
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, every: float, stalls: int, seed: int | None, **options: Any) -> None:
        rng = random.Random(seed)
        done = 0
        while not stalls or done < stalls:
            time.sleep(rng.uniform(0.5, 1.5) * every)
            # Once due, the stall waits (polling each second, up to one more interval) for a run to be held:
            # runs take seconds, so a single look would mostly find none and the blocked view stay empty.
            deadline = time.monotonic() + every
            while time.monotonic() < deadline:
                try:
                    if self.stall_one():
                        done += 1
                        break
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
                    return self._freeze(run.pk, run.fence, run.owner or "", pid)
            time.sleep(0.2)
        return False

    def _freeze(self, run_id: int, fence: int, owner: str, pid: int) -> bool:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        try:
            if self._frozen_inside_a_transaction(run_id):
                # Frozen mid-write, it would hold its locks (on SQLite: the whole database) until thawed,
                # and nobody could take the run over. Let it go and pick another moment.
                self.stdout.write(f"stall: pid {pid} was inside a write; let go at once")
                return False
            self.stdout.write(f"stall: froze worker pid {pid} ({owner}) holding run {run_id} at fence {fence}")
            # Wait past the lease, then hand the run to another worker, as the sweep would.
            time.sleep(float(weave_settings.ONBOARDING_LEASE_TTL) + 1.0)
            queue.enqueue_run(run_id)
            taken = time.monotonic() + 60
            while time.monotonic() < taken:
                if OnboardingRun.objects.filter(pk=run_id, fence__gt=fence).exists():
                    break
                time.sleep(0.2)
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.stdout.write(f"stall: thawed pid {pid}; its attempt at fence {fence} should end blocked")
        return True

    def _frozen_inside_a_transaction(self, run_id: int) -> bool:
        """Whether the frozen worker holds write locks we would wait on: try to take them without waiting."""
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
        try:
            with transaction.atomic():
                OnboardingRun.objects.select_for_update(nowait=True).filter(pk=run_id).exists()
            return False
        except DatabaseError:
            return True
