"""weave.wake: the watcher's decisions, the due-time queries it reads, and coalescing under concurrency."""

import time
from datetime import datetime, timedelta

import pytest
from django.db import DatabaseError
from django.utils import timezone

from notifications.models import Notification
from notifications.queue import enqueue_drain
from onboarding.explain import explain_run
from onboarding.models import OnboardingRun, RunAttempt
from onboarding.runner import run_onboarding
from tests.factories import NotificationFactory, OnboardingRunFactory
from tests.threads import run_threads
from weave import wake
from weave.leases import default_clock
from weave.wake import Watcher, WatchSpec

pytestmark = pytest.mark.django_db


class Spec:
    """A watched kind whose due time the test sets; counts the wake-ups it gets."""

    def __init__(self) -> None:
        self.due: datetime | None = None
        self.wakes = 0

    def spec(self, name: str = "test") -> WatchSpec:
        return WatchSpec(name=name, next_due=lambda: self.due, wake=self._wake)

    def _wake(self) -> None:
        self.wakes += 1


def in_seconds(seconds: float) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)


def test_watcher__with_nothing_pending_sleeps_its_longest_and_wakes_nobody(monkeypatch, settings):
    monkeypatch.setattr(wake, "POLL_MAX", 1.5)
    monkeypatch.setattr(wake, "IDLE", 1.5)  # SQLite polls, PostgreSQL listens
    kind = Spec()
    assert Watcher([kind.spec()]).step(timer_expired=False) == 1.5
    assert kind.wakes == 0


def test_watcher__sleeps_until_the_earliest_due_time():
    kind = Spec()
    kind.due = in_seconds(0.8)
    sleep = Watcher([kind.spec()]).step(timer_expired=False)
    assert 0.5 < sleep < 0.9 and kind.wakes == 0  # 0.8 s by the database clock (SQLite: millisecond steps)


def test_watcher__a_due_time_reached_by_its_own_timer_wakes_at_once():
    kind = Spec()
    kind.due = in_seconds(-0.01)
    watcher = Watcher([kind.spec()])
    watcher.step(timer_expired=True)
    assert kind.wakes == 1


def test_watcher__work_found_due_after_a_notification_gets_a_grace_then_a_wake(monkeypatch, settings):
    monkeypatch.setattr(wake, "GRACE", 0.2)
    kind = Spec()
    kind.due = in_seconds(-0.01)
    watcher = Watcher([kind.spec()])
    # The task that sent the notification is usually claiming it: leave it the grace first.
    assert watcher.step(timer_expired=False) == 0.2
    assert kind.wakes == 0
    # Still due at the next look: nobody took it, so ask for a task, and back off while it stays due.
    first = watcher.step(timer_expired=False)
    assert kind.wakes == 1
    watcher.step(timer_expired=False)  # seen once more (grace) ...
    second = watcher.step(timer_expired=False)  # ... and woken again, after a longer pause
    assert kind.wakes == 2 and second > first


def test_watcher__a_kind_whose_lookup_fails_does_not_blind_it_to_the_others(caplog):
    """A kind whose table is not migrated (or whose query fails) is logged; the other kinds are still woken."""

    def broken() -> datetime:
        raise DatabaseError('relation "shipping_shipment" does not exist')

    before, after = Spec(), Spec()
    before.due = after.due = in_seconds(-0.01)
    watcher = Watcher([before.spec("a"), WatchSpec(name="broken", next_due=broken, wake=lambda: None), after.spec("z")])
    sleep = watcher.step(timer_expired=True)
    assert (before.wakes, after.wakes) == (1, 1)
    assert sleep <= 1.0  # the broken kind is looked at again soon, not after an idle sleep
    failed = [r for r in caplog.records if "event=watch_failed name=broken" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None


def test_notification_next_due_at__is_the_earliest_time_a_pending_row_becomes_claimable():
    assert Notification.objects.next_due_at() is None
    later = in_seconds(60)
    NotificationFactory(next_attempt_at=later)
    NotificationFactory(next_attempt_at=in_seconds(-5), status="delivered")  # finished: not watched
    assert Notification.objects.next_due_at() == later
    # A due row held under a lease that ends sooner: claimable (if its holder dies) when the lease ends.
    lease_end = in_seconds(30)
    NotificationFactory(next_attempt_at=in_seconds(-1), owner="push:x:1:a", fence=1, lease_expires_at=lease_end)
    assert Notification.objects.next_due_at() == lease_end
    free = in_seconds(-2)
    NotificationFactory(next_attempt_at=free)
    assert Notification.objects.next_due_at() == free
    assert default_clock.seconds_until(free) < 0 < default_clock.seconds_until(later) <= 60


def test_onboarding__a_run_released_after_a_retry_after_is_due_then_and_says_so(fake_services, clock):
    fake_services.config.throttle_rate = 1.0  # 429 with Retry-After (capped by ONBOARDING_RETRY_AFTER_MAX)
    run = OnboardingRunFactory()
    assert run_onboarding(run.pk, background=False, clock=clock) == "released"

    run.refresh_from_db()
    expected = clock.current + timedelta(seconds=0.02)
    assert run.next_attempt_at == expected
    (released,) = RunAttempt.objects.filter(run=run)
    assert released.retry_due_at == expected
    assert "Retry-After" in released.reason and "(database time)" in released.reason
    # Not due yet: neither the sweep nor the watcher asks for it; then it is.
    assert not OnboardingRun.objects.needing_a_worker(clock).exists()
    assert OnboardingRun.objects.next_due_at() == expected
    clock.advance(0.5)
    assert list(OnboardingRun.objects.needing_a_worker(clock)) == [run]

    fake_services.config.throttle_rate = 0.0
    assert run_onboarding(run.pk, background=False, clock=clock) == "completed"
    assert OnboardingRun.objects.get(pk=run.pk).next_attempt_at is None
    # The timeline measures the next claim against the due time, on the database clock.
    assert "0.480 s after its due time" in explain_run(run.pk, clock=clock).as_text()


def test_onboarding__a_run_released_without_retry_after_backs_off(fake_services, clock):
    fake_services.config.error_rate = 1.0  # 503 without Retry-After
    run = OnboardingRunFactory()
    run_onboarding(run.pk, background=False, clock=clock)
    run.refresh_from_db()
    waited = (run.next_attempt_at - clock.current).total_seconds()
    assert 1.0 <= waited <= 2.0  # ONBOARDING_RELEASE_BACKOFF 2 s, equal jitter
    assert "backoff with jitter" in run.reason


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_enqueue_drain__of_many_concurrent_callers_exactly_one_enqueues():
    from django_q.models import OrmQ

    won = []
    run_threads(lambda name: won.append(enqueue_drain()), [f"site-{i}" for i in range(8)])
    assert sorted(won) == [False] * 7 + [True]
    assert OrmQ.objects.count() == 1


def test_notification_timeline__gives_the_retry_due_time_and_how_late_the_retry_went_out():
    from notifications.explain import explain_notification
    from notifications.models import DeliveryAttempt

    base = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.get_current_timezone())
    n = NotificationFactory(next_attempt_at=base, status="delivered")
    due = base + timedelta(seconds=1.7)
    DeliveryAttempt.objects.create(
        notification=n,
        owner="push:a:1:x",
        fence=1,
        started_at=base,
        finished_at=base + timedelta(milliseconds=50),
        http_status=503,
        outcome="temporary",
        reason="The provider failed (HTTP 503). Attempt 1 of 5; next try in 1.7 s.",
        retry_at=due,
    )
    DeliveryAttempt.objects.create(
        notification=n,
        owner="push:b:2:y",
        fence=2,
        started_at=due + timedelta(seconds=0.25),
        finished_at=due + timedelta(seconds=0.3),
        http_status=200,
        outcome="delivered",
    )
    text = explain_notification(n.pk).as_text()
    assert "Next try due 12:00:01.700 UTC (database time)." in text
    assert "0.250 s after its due time 12:00:01.700 UTC" in text


def test_onboarding__a_task_queued_before_the_release_does_not_claim_the_run_before_its_due_time(fake_services, clock):
    fake_services.config.throttle_rate = 1.0
    run = OnboardingRunFactory()
    assert run_onboarding(run.pk, background=False, clock=clock) == "released"
    fake_services.config.throttle_rate = 0.0
    # A second task for the run (queued by a sweep before the release) comes too early: it takes nothing.
    assert run_onboarding(run.pk, background=False, clock=clock) == "not_claimable"
    assert RunAttempt.objects.filter(run=run).count() == 1
    clock.advance(0.5)
    assert run_onboarding(run.pk, background=False, clock=clock) == "completed"


class CountingSpec(Spec):
    """A watched kind that also counts its looks (each one an aggregate query in production)."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    def spec(self, name: str = "test") -> WatchSpec:
        def next_due() -> datetime | None:
            self.looks += 1
            return self.due

        return WatchSpec(name=name, next_due=next_due, wake=self._wake)


@pytest.fixture
def no_paused_watch():
    wake._paused.clear()
    yield
    wake._paused.clear()


def test_watcher__a_kind_a_task_here_paused_is_not_looked_at_and_the_others_are(monkeypatch, settings, no_paused_watch):
    monkeypatch.setattr(wake, "GRACE", 0.2)
    monkeypatch.setattr(wake, "POLL_MAX", 1.0)
    monkeypatch.setattr(wake, "IDLE", 30.0)
    busy, other = CountingSpec(), CountingSpec()
    busy.due = other.due = in_seconds(-0.01)  # a backlog, and another kind's work that is due too
    watcher = Watcher([busy.spec("busy"), other.spec("other")])

    wake.pause_watch("busy", 0.6)
    sleeps = [watcher.step(timer_expired=False) for _ in range(4)]  # rounds after notifications

    assert busy.looks == 0 and busy.wakes == 0  # no query, and no task asked for the busy cluster
    assert other.looks == 4 and other.wakes == 2  # the other kind is watched as before: grace, ask, grace, ask
    assert all(0 < sleep <= 0.6 for sleep in sleeps)  # it looks again when the pause ends


def test_watcher__when_the_pause_ends_the_kind_is_looked_at_with_a_grace_first(monkeypatch, settings, no_paused_watch):
    monkeypatch.setattr(wake, "GRACE", 0.2)
    monkeypatch.setattr(wake, "POLL_MAX", 1.0)
    busy = CountingSpec()
    busy.due = in_seconds(-0.01)
    watcher = Watcher([busy.spec("busy")])
    watcher.step(timer_expired=False)  # seen due once before the task paused its watch
    wake.pause_watch("busy", 0.05)
    watcher.step(timer_expired=False)
    assert busy.looks == 1

    time.sleep(0.06)
    assert watcher.step(timer_expired=False) == 0.2  # looked at again: a grace, as after any notification
    assert (busy.looks, busy.wakes) == (2, 0)
    watcher.step(timer_expired=False)
    assert (busy.looks, busy.wakes) == (3, 1)  # still due, nobody on it: a task is asked for


def test_watcher__a_pause_is_this_process_s_own(monkeypatch, settings, no_paused_watch):
    """Another process's watcher (here: one told nothing) looks, and asks for helpers, as before."""
    monkeypatch.setattr(wake, "GRACE", 0.2)
    busy = CountingSpec()
    busy.due = in_seconds(-0.01)
    wake.pause_watch("busy", 5.0)
    elsewhere = Watcher([busy.spec("busy")])
    wake._paused.clear()  # what the other process's module holds: no pause

    elsewhere.step(timer_expired=True)

    assert (busy.looks, busy.wakes) == (1, 1)


def test_watcher__a_timer_round_looks_only_at_the_kinds_whose_time_came(monkeypatch, settings, no_paused_watch):
    """A kind kept short (overdue, or paused) no longer costs the other kinds a query every round; each
    is still looked at when its own sleep runs out, and every kind after a notification."""
    monkeypatch.setattr(wake, "GRACE", 0.05)
    monkeypatch.setattr(wake, "POLL_MAX", 1.0)
    monkeypatch.setattr(wake, "IDLE", 30.0)
    busy, quiet = CountingSpec(), CountingSpec()
    quiet.due = in_seconds(1.0)  # a retry due soon
    wake.pause_watch("busy", 0.05)
    watcher = Watcher([busy.spec("busy"), quiet.spec("quiet")])
    watcher.step(timer_expired=False)
    assert (busy.looks, quiet.looks) == (0, 1)

    for _ in range(3):  # the pause's short timer rounds, renewed by the drain each time
        wake.pause_watch("busy", 0.05)
        time.sleep(0.05)
        watcher.step(timer_expired=True)
    assert quiet.looks == 1  # its time (1 s) has not come: not queried again

    time.sleep(1.0)
    watcher.step(timer_expired=True)
    assert quiet.looks == 2 and quiet.wakes == 1  # its own timer: looked at, and woken at once
    watcher.step(timer_expired=False)
    assert quiet.looks == 3  # after a notification every kind is looked at
