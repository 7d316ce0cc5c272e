"""The load: suppliers built to succeed or to fail for a known business reason, and the calls that start work.

Everything goes through the apps' public services (`notification_create`, `onboarding_start`), the
way a real caller would, so the enqueueing on commit is exercised too.
"""

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections, connection, transaction

from onboarding.testing.numbers import german_iban, german_vat_number
from tools.chaos.config import ChaosConfig

# What a supplier is built to end as. The audit checks each run ends exactly so.
EXPECT_COMPLETED = "completed"
EXPECT_INVALID_TAX = "invalid_tax_id"
EXPECT_SANCTIONED = "sanctioned"
EXPECT_BAD_IBAN = "bad_iban"
# A fragment the failed run's reason must contain, per kind (the steps' own wording).
REASON_FRAGMENT = {
    EXPECT_INVALID_TAX: "is invalid",
    EXPECT_SANCTIONED: "Sanctions screening hit",
    EXPECT_BAD_IBAN: "Bank account refused",
}
# The step each kind must fail at (the run's stored `failed_step`): the one whose service refuses it.
FAILED_STEP = {
    EXPECT_INVALID_TAX: "verify_tax_id",
    EXPECT_SANCTIONED: "screen_sanctions",
    EXPECT_BAD_IBAN: "register_bank_account",
}
CHAOS_PREFIX = "Chaos supplier"


@dataclass
class SupplierPlan:
    legal_name: str
    tax_id: str
    iban: str
    expect: str


def supplier_plans(config: ChaosConfig) -> list[SupplierPlan]:
    """M suppliers; a seeded share of them built to fail at tax id, sanctions or bank account."""
    rng = random.Random(config.seed * 7919)
    plans = []
    for i in range(config.runs):
        draw = rng.random()
        expect = EXPECT_COMPLETED
        if draw < config.invalid_tax_share:
            expect = EXPECT_INVALID_TAX
        elif draw < config.invalid_tax_share + config.sanctioned_share:
            expect = EXPECT_SANCTIONED
        elif draw < config.invalid_tax_share + config.sanctioned_share + config.bad_iban_share:
            expect = EXPECT_BAD_IBAN
        plans.append(
            SupplierPlan(
                legal_name=f"{CHAOS_PREFIX} {config.seed}-{i:05d}",
                # Every number is well-formed (validation refuses the supplier before a run otherwise).
                # The ones built to fail are refused by the fake services for a business reason: a tax
                # id it has no registration for, an IBAN whose account is closed (see the lists below).
                tax_id=german_vat_number(config.seed * 100_000 + i),
                iban=german_iban(config.seed * 100_000 + i),
                expect=expect,
            )
        )
    return plans


def sanctioned_names(config: ChaosConfig) -> list[str]:
    return [p.legal_name for p in supplier_plans(config) if p.expect == EXPECT_SANCTIONED]


def unregistered_tax_ids(config: ChaosConfig) -> list[str]:
    """Well-formed tax ids the fake tax-id service answers "not registered"."""
    return [p.tax_id for p in supplier_plans(config) if p.expect == EXPECT_INVALID_TAX]


def refused_ibans(config: ChaosConfig) -> list[str]:
    """Well-formed IBANs the fake bank-account service refuses (the account is closed)."""
    return [p.iban for p in supplier_plans(config) if p.expect == EXPECT_BAD_IBAN]


@dataclass
class LoadProgress:
    notifications: int = 0
    runs: int = 0
    done: bool = False
    error: BaseException | None = None
    run_ids: list[int] = field(default_factory=list)
    notification_ids: list[int] = field(default_factory=list)
    device_notifications: int = 0
    # Set by the runner while planned faults have not fired yet: the load thread then keeps a backlog
    # of notifications (the top-up below), so a fault never finds the work drained before its turn.
    faults_due: threading.Event = field(default_factory=threading.Event)
    topped_up: int = 0
    # Held by the load thread around each chunk it writes, and by the runner while it restarts PostgreSQL
    # (the pg_restart fault): the load stands in for the site's web requests, which are not what that
    # fault tests, so no chunk is ever half-committed when the server goes down.
    db_lock: threading.Lock = field(default_factory=threading.Lock)
    # Bumped by the runner after each PostgreSQL restart: the load thread's session is gone, reopen it.
    db_epoch: int = 0

    def reconnect_if_restarted(self, seen: int) -> int:
        """Close this thread's connection if the server restarted since epoch `seen`; return the epoch now."""
        if self.db_epoch != seen:
            connection.close()
        return self.db_epoch


def create_suppliers(config: ChaosConfig) -> dict[int, str]:
    """Create the suppliers (not the runs); return supplier id -> expected end."""
    from onboarding.models import Supplier

    plans = supplier_plans(config)
    suppliers = Supplier.objects.bulk_create(
        [
            Supplier(
                legal_name=p.legal_name,
                country="DE",
                tax_id=p.tax_id,
                contact_email=f"contact{i}@chaos.example",
                device_token=f"chaos-device-{config.seed}-{i:05d}",
                iban=p.iban,
            )
            for i, p in enumerate(plans)
        ]
    )
    return {s.pk: p.expect for s, p in zip(suppliers, plans, strict=True)}


DEVICE_USER_PREFIX = "chaos-device-user-"
LIVE, DEAD = "live", "dead"


def create_devices(config: ChaosConfig) -> tuple[dict[int, str], list[int]]:
    """Register `config.devices` devices on fcm/apns/webpush for users of three devices each, through the
    service; a seeded share with tokens the fakes refuse as dead. Return device id -> live/dead, and user ids."""
    import json

    from django.contrib.auth import get_user_model

    from notifications.services import device_register
    from notifications.testing.fake_webpush import derive_subscription
    from notifications.testing.push_fakes import TOKENS_FILE

    if not config.devices:
        return {}, []
    rng = random.Random(config.seed * 104729)
    sample = json.loads((config.push_fakes_dir / TOKENS_FILE).read_text())
    webpush_base = json.loads(sample["live"]["webpush"])["endpoint"].rsplit("/wp/", 1)[0]
    users = get_user_model()
    plan: dict[int, str] = {}
    user_ids: list[int] = []
    user = None
    for i in range(config.devices):
        if i % 3 == 0:
            user = users.objects.create_user(f"{DEVICE_USER_PREFIX}{config.seed}-{i // 3:05d}")
            user_ids.append(user.pk)
        backend = ("fcm", "apns", "webpush")[i % 3]
        dead = rng.random() < config.dead_device_share
        name = f"c{config.seed}x{i:05d}"
        if backend == "fcm":
            token = f"{'dead' if dead else 'live'}-{name}-" + "f" * 20
        elif backend == "apns":
            token = ("dead" if dead else "a11e") + name.encode().hex().ljust(60, "0")
        else:
            token = derive_subscription(webpush_base, f"gone-{name}" if dead else name).as_token()
        device = device_register(user=user, backend=backend, token=token, platform="")
        plan[device.pk] = DEAD if dead else LIVE
    return plan, user_ids


class LoadThread(threading.Thread):
    """Create N notifications and M runs, interleaved, in small transactions (each enqueues on commit)."""

    def __init__(
        self, config: ChaosConfig, supplier_ids: list[int], progress: LoadProgress, user_ids: list[int] | None = None
    ) -> None:
        super().__init__(name="chaos-load", daemon=True)
        self.config = config
        self.supplier_ids = supplier_ids
        self.progress = progress
        self.user_ids = user_ids or []

    def run(self) -> None:
        from onboarding.models import Supplier

        try:
            n, m = self.config.notifications, len(self.supplier_ids)
            chunk = 100
            suppliers = iter(Supplier.objects.filter(pk__in=self.supplier_ids).order_by("pk"))
            # Spread the runs evenly between the notification chunks.
            chunks = max(1, -(-n // chunk))
            runs_per_chunk = -(-m // chunks)
            created = 0
            sends = self._device_sends()
            sends_per_chunk = -(-len(sends) // chunks) if sends else 0
            epoch = self.progress.db_epoch
            while created < n or self.progress.runs < m or sends:
                with self.progress.db_lock:
                    epoch = self.progress.reconnect_if_restarted(epoch)
                    created = self._chunk(chunk, created, sends, sends_per_chunk, suppliers, runs_per_chunk)
            self._top_up()
        except BaseException as exc:  # reported by the runner, which fails the whole run
            self.progress.error = exc
        finally:
            self.progress.done = True
            close_old_connections()
            connection.close()

    def _chunk(
        self,
        chunk: int,
        created: int,
        sends: list[tuple[int, int | None]],
        sends_per_chunk: int,
        suppliers: Iterator[Any],
        runs_per_chunk: int,
    ) -> int:
        """Create one chunk of notifications, device sends and runs; return the notifications created so far."""
        from notifications.services import notification_create
        from onboarding.services import onboarding_start

        n = self.config.notifications
        with transaction.atomic():
            for _ in range(min(chunk, n - created)):
                row = notification_create(
                    device_token=f"chaos-token-{created:06d}",
                    title=f"Chaos message {created}",
                    body="Sent by weave_chaos.",
                    data={"chaos": self.config.seed, "n": created},
                )
                self.progress.notification_ids.append(row.pk)
                created += 1
        self.progress.notifications = created
        for _ in range(sends_per_chunk):
            if sends:
                self._send_to_user(*sends.pop(0))
        for _ in range(runs_per_chunk):
            supplier = next(suppliers, None)
            if supplier is None:
                break
            run = onboarding_start(supplier=supplier, started_by=None)
            self.progress.run_ids.append(run.pk)
            self.progress.runs += 1
        return created

    def _top_up(self) -> None:
        """Keep notifications pending while faults are still due (they wait for workers holding leases).

        How fast the planned load drains depends on the machine; how long the faults take (gaps, a
        fault waiting for a target, a stop lasting 2 x TTL) does not. Without this a fast machine
        finishes the load before the last fault's turn and that fault never runs. The extra rows are
        counted in the report and audited like the rest.
        """
        from notifications.models import Notification
        from notifications.services import notification_create

        floor = self.config.push_batch * self.config.clusters
        epoch = self.progress.db_epoch
        while self.progress.faults_due.is_set():
            with self.progress.db_lock:
                epoch = self.progress.reconnect_if_restarted(epoch)
                backlog = Notification.objects.pending().count()
                if backlog < floor:
                    self._top_up_batch(notification_create)
            if backlog >= floor:
                time.sleep(0.2)

    def _top_up_batch(self, notification_create: Any) -> None:
        with transaction.atomic():
            for _ in range(self.config.push_batch):
                n = self.progress.notifications
                row = notification_create(
                    device_token=f"chaos-token-{n:06d}",
                    title=f"Chaos message {n} (top-up)",
                    body="Sent by weave_chaos while faults were still due.",
                    data={"chaos": self.config.seed, "n": n},
                )
                self.progress.notification_ids.append(row.pk)
                self.progress.notifications += 1
                self.progress.topped_up += 1

    def _device_sends(self) -> list[tuple[int, int | None]]:
        """(user id, ttl or None) for each send to a user's devices, seeded."""
        if not self.user_ids:
            return []
        rng = random.Random(self.config.seed * 15485863)
        count = self.config.device_sends or self.config.devices
        return [
            (
                self.user_ids[i % len(self.user_ids)],
                self.config.short_ttl if rng.random() < self.config.expiring_share else None,
            )
            for i in range(count)
        ]

    def _send_to_user(self, user_id: int, ttl: int | None) -> None:
        from django.contrib.auth import get_user_model

        from notifications.services import notification_send_to_user

        user = get_user_model().objects.get(pk=user_id)
        rows = notification_send_to_user(
            user=user, title="Chaos device message", body="Sent by weave_chaos.", data={"chaos": "1"}, ttl=ttl
        )
        self.progress.device_notifications += len(rows)
