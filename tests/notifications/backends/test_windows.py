"""Each backend has a window of its own: a backend whose window is full holds back only its own rows.

HTTP/2 backends multiplex streams on one connection per origin, so their default window is wider
(PUSH_HTTP2_CONCURRENCY) than an HTTP/1.1 backend's, where each request out is a connection
(PUSH_CONCURRENCY).
"""

import asyncio
import threading
import time

import pytest

from notifications.backends import Outcome, PushBackend, PushMessage, SendResult, get_backend
from notifications.delivery import deliver_batch
from notifications.delivery.worker import PushWorker
from notifications.models import Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db

GATE_SECONDS = 5.0  # the slow backend answers by itself after this, so a regression fails instead of hanging


class Gated(PushBackend):
    """Answers only once `opened` is set (or after GATE_SECONDS), counting its sends out at once."""

    def __init__(self, alias: str, window: int) -> None:
        super().__init__(alias=alias, options={}, timeout=10.0, concurrency=window)
        self.opened = threading.Event()
        self.opened_by_timeout = False
        self.out = 0
        self.peak = 0

    async def send(self, message: PushMessage) -> SendResult:
        self.out += 1
        self.peak = max(self.peak, self.out)
        ends = time.monotonic() + GATE_SECONDS
        while not self.opened.is_set():
            if time.monotonic() > ends:
                self.opened_by_timeout = True
                self.opened.set()
            await asyncio.sleep(0.005)
        self.out -= 1
        return SendResult(outcome=Outcome.DELIVERED, provider_message_id=message.idempotency_key)


class Counting(PushBackend):
    """Answers at once; once it has answered `expected` rows it opens `gate`."""

    def __init__(self, alias: str, window: int, gate: Gated, expected: int) -> None:
        super().__init__(alias=alias, options={}, timeout=10.0, concurrency=window)
        self.gate, self.expected, self.answered = gate, expected, 0

    async def send(self, message: PushMessage) -> SendResult:
        await asyncio.sleep(0)
        self.answered += 1
        if self.answered >= self.expected:
            self.gate.opened.set()
        return SendResult(outcome=Outcome.DELIVERED, provider_message_id=message.idempotency_key)


def test_a_full_window_holds_back_only_its_own_backends_rows(push_settings, clock):
    slow = Gated("slow", window=2)
    quick = Counting("quick", window=2, gate=slow, expected=6)
    # The slow backend's rows come first in the claim, as many as the worker's PUSH_CONCURRENCY (10):
    # with one window for the whole worker they would take every slot, and the quick backend's rows
    # would wait for the slow answers.
    NotificationFactory.create_batch(10, backend="slow", next_attempt_at=clock.current)
    NotificationFactory.create_batch(6, backend="quick", next_attempt_at=clock.current)

    report = deliver_batch(clock=clock, backends={"slow": slow, "quick": quick})

    assert not slow.opened_by_timeout, "the quick backend's rows waited for the slow backend's answers"
    assert quick.answered == 6
    assert slow.peak == 2  # never more out than its own window
    assert report.delivered == 16
    assert set(Notification.objects.values_list("status", flat=True)) == {"delivered"}


def test_rows_waiting_for_a_full_window_go_back_when_the_budget_stops_the_drain(push_settings, clock):
    slow = Gated("slow", window=1)
    waiting = NotificationFactory.create_batch(4, backend="slow", next_attempt_at=clock.current)
    slow.opened.set()  # answers at once; the one slot still lets only one row out at a time

    def spend_after_first(pk):
        clock.advance(11)

    from notifications.delivery import Hooks

    report = deliver_batch(clock=clock, budget=10, backends={"slow": slow}, hooks=Hooks(before_send=spend_after_first))

    assert report.sent == 1 and report.budget_spent
    assert report.released == 3  # the rows that waited for the window are handed back, not stranded
    rest = Notification.objects.exclude(status="delivered")
    assert rest.count() == 3 and set(rest.values_list("owner", flat=True)) == {None}
    assert len(waiting) == 4


def test_default_windows_by_protocol(settings, fcm_options):
    settings.WEAVE = {
        "PUSH_CONCURRENCY": 7,
        "PUSH_HTTP2_CONCURRENCY": 90,
        "PUSH_URL": "https://push.example.com/send",
        "PUSH_BACKENDS": {
            "default": {
                "BACKEND": "notifications.backends.webhook.WebhookBackend",
                "OPTIONS": {"url": "https://push.example.com/send", "token": "t"},
            },
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options},
        },
    }
    assert get_backend("default").concurrency == 7
    assert get_backend("fcm").concurrency == 90
    worker = PushWorker()
    try:
        assert worker.windows == {"default": 7, "fcm": 90}
        assert worker.concurrency == 97
        assert worker.window_of("not-configured") == 7
    finally:
        worker.close()
    explicit = PushWorker(concurrency=3)  # a caller's window applies to every backend
    try:
        assert explicit.windows == {"default": 3, "fcm": 3}
    finally:
        explicit.close()


def test_a_worker_claims_no_more_while_rows_wait_for_a_full_window(push_settings, clock):
    """Many backends configured, traffic for one: the worker's window is the sum of the windows, but it
    must not claim rows up to that sum while the busy backend's own rows wait in line."""
    slow = Gated("slow", window=2)
    slow.opened.set()  # answers at once
    idle = Gated("idle", window=50)
    NotificationFactory.create_batch(30, backend="slow", next_attempt_at=clock.current)
    in_hand: list[int] = []

    def count_claimed(pk):
        in_hand.append(Notification.objects.filter(status="pending", owner__isnull=False).count())

    from notifications.delivery import Hooks, drain

    report = drain(
        clock=clock, batch_size=5, enqueue_more=False, backends={"slow": slow, "idle": idle},
        hooks=Hooks(before_send=count_claimed),
    )  # fmt: skip

    assert report.delivered == 30
    # One batch beyond the slots of its backend at most, never the sum of every backend's window (52).
    assert max(in_hand) <= 2 + 5


class ClockMoving(PushBackend):
    """Answers at once, but its first send moves the worker's clock `seconds` ahead."""

    def __init__(self, alias: str, clock, seconds: float) -> None:
        super().__init__(alias=alias, options={}, timeout=10.0, concurrency=1)
        self.clock, self.seconds, self.sent = clock, seconds, 0

    async def send(self, message: PushMessage) -> SendResult:
        self.sent += 1
        if self.sent == 1:
            self.clock.advance(self.seconds)
        return SendResult(outcome=Outcome.DELIVERED, provider_message_id=message.idempotency_key)


def test_a_row_that_expires_while_it_waits_for_a_full_window_ends_expired_unsent(push_settings, clock):
    """A row is judged when a slot is free for it, not when it first met the full window: its expiry
    then, at the time it would have been sent, decides."""
    from datetime import timedelta

    backend = ClockMoving("one", clock, seconds=3)
    idle = Gated("idle", window=20)  # the worker's window (21) is wider than the busy backend's (1)
    first = NotificationFactory(backend="one", next_attempt_at=clock.current)
    late = NotificationFactory(
        backend="one", next_attempt_at=clock.current, expires_at=clock.current + timedelta(seconds=1)
    )

    report = deliver_batch(clock=clock, backends={"one": backend, "idle": idle})

    assert backend.sent == 1  # only the first: the other expired while the one slot was taken
    assert report.delivered == 1 and report.expired == 1
    first.refresh_from_db()
    late.refresh_from_db()
    assert first.status == "delivered"
    assert late.status == "expired" and late.provider_message_id == ""


def test_rows_waiting_for_a_full_window_are_judged_once_each(push_settings, clock, monkeypatch):
    """Every answer brings the backend's waiting rows back to the front of the line. Each must be
    judged (lease, expiry, device, quiet hours) once, when it starts, not again at every answer.

    Another backend is configured, as on most sites: the worker's window is the sum of the two, so
    the busy backend's rows meet its own full window rather than the worker's."""
    backend = Gated("one", window=1)
    backend.opened.set()  # answers at once; one slot: the others wait
    idle = Gated("idle", window=20)
    NotificationFactory.create_batch(12, backend="one", next_attempt_at=clock.current)
    judged: list[object] = []
    judge = PushWorker.unsendable

    def counted(self, row):
        judged.append(row.pk)
        return judge(self, row)

    monkeypatch.setattr(PushWorker, "unsendable", counted)

    report = deliver_batch(clock=clock, batch_size=12, backends={"one": backend, "idle": idle})

    assert report.delivered == 12
    assert len(judged) == len(set(judged)) == 12  # each row once


class Slow(PushBackend):
    """Answers each send after `seconds` of real time."""

    def __init__(self, alias: str, window: int, seconds: float) -> None:
        super().__init__(alias=alias, options={}, timeout=10.0, concurrency=window)
        self.seconds = seconds

    async def send(self, message: PushMessage) -> SendResult:
        await asyncio.sleep(self.seconds)
        return SendResult(outcome=Outcome.DELIVERED, provider_message_id=message.idempotency_key)


def test_a_worker_whose_windows_are_full_waits_for_an_answer_instead_of_spinning(push_settings, clock, monkeypatch):
    """The last claim found fewer rows than it asked for, so the next look is due after a short
    recheck; but the rows in hand fill the backend's window, so no claim may run then. The loop must
    sleep until an answer makes room, not wake over and over to find it still full."""
    from notifications.delivery import drain
    from notifications.delivery.worker import _Pump

    NotificationFactory.create_batch(15, backend="slow", next_attempt_at=clock.current)
    turns: list[float] = []
    take = _Pump._take

    def counted(self, timeout):
        turns.append(timeout)
        return take(self, timeout)

    monkeypatch.setattr(_Pump, "_take", counted)

    # Two out at a time for 20 ms each: about 160 ms with rows in hand past the window.
    report = drain(
        clock=clock, batch_size=10, enqueue_more=False, backends={"slow": Slow("slow", window=2, seconds=0.02)}
    )

    assert report.delivered == 15
    # About one wait per answer (15) and per finished group; a spin made thousands.
    assert len(turns) < 100, f"{len(turns)} waits, {sum(t == 0 for t in turns)} of them not waiting at all"
