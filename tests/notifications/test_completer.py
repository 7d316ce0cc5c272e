"""The completer alone: a group of answers finished behind each row's guard, in one transaction."""

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.backends import Outcome, SendResult
from notifications.delivery.claims import ClaimBuffer
from notifications.delivery.completer import DONE, Completer, CompleterThread, count
from notifications.delivery.inbox import Inbox
from notifications.delivery.report import DeliveryReport
from notifications.models import DeliveryAttempt, Device, Notification
from tests.factories import NotificationFactory
from weave.jobs import RetryPolicy
from weave.leases import DatabaseClock

TTL = 30
RETRY = RetryPolicy(max_attempts=5, backoff=2.0, backoff_max=3600.0)


def _claimed(clock, owner="done-a", limit=10):
    buffer = ClaimBuffer(owner=owner, clock=clock, ttl=TTL, renew_margin=10)
    _, rows = buffer.claim(limit)
    for row in rows:
        row.sent_at = row.claim.database_time(clock.monotonic())
    return rows


def _due_and_claimed(clock: DatabaseClock, n: int, owner: str):
    """N rows made due by the database clock itself (a real completer thread writes by it), then claimed."""
    NotificationFactory.create_batch(n, next_attempt_at=None)
    Notification.objects.update(next_attempt_at=clock.now())
    return _claimed(clock, owner=owner)


def _completer(clock, owner="done-a") -> Completer:
    return Completer(owner=owner, clock=clock, retry=RETRY, rng=random.Random(1))


@pytest.mark.django_db
def test_finish__a_group_in_one_update_and_one_insert_each_row_as_its_answer_says(clock):
    phone = Device.objects.create(backend="default", token="dead-token")
    happy = Device.objects.create(backend="default", token="happy-token")
    NotificationFactory(next_attempt_at=clock.current - timedelta(seconds=3), device=happy, device_token="happy-token")
    NotificationFactory(next_attempt_at=clock.current - timedelta(seconds=2))
    NotificationFactory(next_attempt_at=clock.current - timedelta(seconds=1), device=phone, device_token="dead-token")
    delivered, throttled, dead = _claimed(clock)
    answers = [
        (delivered, SendResult(outcome=Outcome.DELIVERED, http_status=200, provider_message_id="m-1")),
        (throttled, SendResult(outcome=Outcome.TEMPORARY, http_status=429, retry_after=120, reason="HTTP 429")),
        (dead, SendResult(outcome=Outcome.PERMANENT, http_status=410, token_invalid=True, reason="HTTP 410")),
    ]
    completer = _completer(clock)
    with CaptureQueriesContext(connection) as queries:
        done = completer.finish(answers)
    assert [landed for _, landed in done.plans] == [True, True, True] and done.pruned == 1
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(("UPDATE", "INSERT", "WITH"))]
    guarded = [
        s
        for s in writes
        if s.startswith("WITH") or (s.startswith("UPDATE") and ("FROM unnest(" in s or "FROM (VALUES" in s))
    ]
    assert len(guarded) == 1 and len([s for s in writes if s.startswith("INSERT")]) == 1
    rows = {n.pk: n for n in Notification.objects.all()}
    assert (rows[delivered.pk].status, rows[delivered.pk].provider_message_id) == ("delivered", "m-1")
    assert rows[throttled.pk].next_attempt_at == clock.current + timedelta(seconds=120)
    assert (rows[throttled.pk].status, rows[throttled.pk].attempts) == ("pending", 1)
    assert rows[dead.pk].status == "failed"
    assert {n.owner for n in rows.values()} == {None}
    assert set(DeliveryAttempt.objects.values_list("outcome", "owner", "fence", "number")) == {
        ("delivered", "done-a", 1, 1),
        ("temporary", "done-a", 1, 1),
        ("permanent", "done-a", 1, 1),
    }
    phone.refresh_from_db()
    assert not phone.active and "HTTP 410" in phone.deactivation_reason and phone.pk in done.dead
    # last_used_at is off the hot path: written by the next flush, not by the finish.
    happy.refresh_from_db()
    assert happy.last_used_at is None
    completer.flush_touches()
    happy.refresh_from_db()
    assert happy.last_used_at == clock.current

    report = DeliveryReport(owner="done-a")
    count(done, report)
    assert (report.delivered, report.temporary, report.permanent, report.failed, report.pruned) == (1, 1, 1, 1, 1)
    assert report.groups == 1


@pytest.mark.django_db
def test_finish__each_receipt_names_the_backend_its_notification_went_through(clock):
    NotificationFactory(next_attempt_at=clock.current - timedelta(seconds=2), backend="fcm")
    NotificationFactory(next_attempt_at=clock.current - timedelta(seconds=1), backend="default")
    fcm, default = _claimed(clock)
    ok = SendResult(outcome=Outcome.DELIVERED, http_status=200, provider_message_id="m")
    _completer(clock).finish([(fcm, ok), (default, ok)])
    assert dict(DeliveryAttempt.objects.values_list("notification_id", "backend")) == {
        fcm.pk: "fcm",
        default.pk: "default",
    }


@pytest.mark.django_db
def test_finish__a_row_taken_over_changes_nothing_and_gets_a_lease_lost_receipt(clock):
    NotificationFactory.create_batch(2, next_attempt_at=clock.current)
    kept, taken = _claimed(clock)
    clock.advance(TTL + 1)
    Notification.objects.filter(pk=taken.pk).claim_batch(owner="rival", ttl=600, limit=1, clock=clock)
    before = Notification.objects.filter(pk=taken.pk).values().get()
    Notification.objects.filter(pk=kept.pk).update(lease_expires_at=clock.current + timedelta(seconds=5))
    ok = SendResult(outcome=Outcome.DELIVERED, http_status=200, provider_message_id="late")
    done = _completer(clock).finish([(kept, ok), (taken, ok)])
    assert [landed for _, landed in done.plans] == [True, False]
    assert Notification.objects.filter(pk=taken.pk).values().get() == before  # the rival's row, untouched
    lost = DeliveryAttempt.objects.get(notification_id=taken.pk)
    assert lost.outcome == "lease_lost" and "now held by rival at fence 2" in lost.reason
    report = DeliveryReport(owner="done-a")
    count(done, report)
    assert (report.delivered, report.lease_lost) == (1, 1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_completer_thread__finishes_on_its_own_connection_and_posts_what_it_did():
    clock = DatabaseClock()
    rows = _due_and_claimed(clock, 4, owner="done-t")
    inbox = Inbox()
    runner = CompleterThread(_completer(clock, owner="done-t"), inbox, gather=0.01)
    ok = SendResult(outcome=Outcome.DELIVERED, http_status=200)
    runner.submit([(row, ok) for row in rows[:2]])
    runner.submit([(row, ok) for row in rows[2:]])
    finished = []
    while sum(len(done.plans) for done in finished) < 4:
        finished += [item for kind, item in inbox.take(30) if kind == DONE]
    runner.close()
    assert not runner._thread.is_alive()
    # Written and committed by the completer's connection: this thread's connection sees it.
    assert set(Notification.objects.values_list("status", "owner")) == {("delivered", None)}
    assert DeliveryAttempt.objects.filter(owner="done-t", outcome="delivered").count() == 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_completer_thread__a_group_with_nothing_else_out_is_finished_without_waiting_the_gather():
    clock = DatabaseClock()
    rows = _due_and_claimed(clock, 2, owner="done-g")
    inbox = Inbox()
    # A gather far longer than the test may wait: only a group handed in with more=False can beat it.
    runner = CompleterThread(_completer(clock, owner="done-g"), inbox, gather=600.0)
    ok = SendResult(outcome=Outcome.DELIVERED, http_status=200)
    try:
        runner.submit([(rows[0], ok)], more=False)
        first = [item for kind, item in inbox.take(30) if kind == DONE]
        assert [len(done.plans) for done in first] == [1]
        # With sends still out, and the group before it handed in within the gather, it gathers: the
        # next group waits for more (or for close()).
        runner.submit([(rows[1], ok)])
        assert [kind for kind, _ in inbox.take(0.5)] == []
    finally:
        runner.close()
    assert Notification.objects.filter(status="delivered").count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_completer_thread__a_group_after_a_quiet_spell_is_finished_without_waiting_the_gather():
    clock = DatabaseClock()
    rows = _due_and_claimed(clock, 3, owner="done-q")
    inbox = Inbox()
    runner = CompleterThread(_completer(clock, owner="done-q"), inbox, gather=600.0)
    ok = SendResult(outcome=Outcome.DELIVERED, http_status=200)
    try:
        # Sends still out, but no group came within the gather before it: answers trickle in, and
        # waiting for more would only delay this one.
        runner.submit([(rows[0], ok)], more=True)
        first = [item for kind, item in inbox.take(30) if kind == DONE]
        assert [len(done.plans) for done in first] == [1]
        # The next groups follow within the gather: they wait for each other and go as one.
        runner.submit([(rows[1], ok)], more=True)
        runner.submit([(rows[2], ok)], more=True)
        assert [kind for kind, _ in inbox.take(0.5)] == []
    finally:
        runner.close()
    rest = [item for kind, item in inbox.take(0.0) if kind == DONE]
    assert [len(done.plans) for done in rest] == [2]
    assert Notification.objects.filter(status="delivered").count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_completer_thread__a_group_handed_in_with_rows_waiting_for_a_slot_waits_the_backlog_gather():
    clock = DatabaseClock()
    rows = _due_and_claimed(clock, 4, owner="done-b")
    inbox = Inbox()
    # No gather at all without a backlog; with one, longer than the test may wait.
    runner = CompleterThread(_completer(clock, owner="done-b"), inbox, gather=0.0, backlog_gather=600.0)
    ok = SendResult(outcome=Outcome.DELIVERED, http_status=200)
    try:
        runner.submit([(rows[0], ok)], more=True)
        first = [item for kind, item in inbox.take(30) if kind == DONE]
        assert [len(done.plans) for done in first] == [1]
        # The last answer of all (nothing else out) is finished at once, backlog or not.
        runner.submit([(rows[1], ok)], more=False, backlog=True)
        second = [item for kind, item in inbox.take(30) if kind == DONE]
        assert [len(done.plans) for done in second] == [1]
        # Rows wait for a slot: this finish waits for more answers instead of writing one row.
        runner.submit([(rows[2], ok)], more=True, backlog=True)
        runner.submit([(rows[3], ok)], more=True, backlog=True)
        assert [kind for kind, _ in inbox.take(0.5)] == []
    finally:
        runner.close()
    rest = [item for kind, item in inbox.take(0.0) if kind == DONE]
    assert [len(done.plans) for done in rest] == [2]
    assert Notification.objects.filter(status="delivered").count() == 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_drain_tells_its_completer_when_rows_wait_for_a_slot(push_settings, fake, settings, monkeypatch):
    from notifications.delivery import drain

    settings.WEAVE = {**settings.WEAVE, "PUSH_CONCURRENCY": 2}
    NotificationFactory.create_batch(8, next_attempt_at=None)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())
    handed: list[tuple[int, bool, bool]] = []
    submit = CompleterThread.submit

    def recorded(self, group, *, more=True, backlog=False):
        handed.append((len(group), more, backlog))
        submit(self, group, more=more, backlog=backlog)

    monkeypatch.setattr(CompleterThread, "submit", recorded)
    report = drain(enqueue_more=False)

    assert report.delivered == 8
    assert sum(size for size, _, _ in handed) == 8
    # Two slots and eight rows: the first answers come while rows wait, the last while none do.
    assert handed[0][2] is True
    assert handed[-1][1:] == (False, False)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_completer_thread__a_bug_in_the_finish_ends_the_drain_with_it_instead_of_hanging(
    push_settings, fake, monkeypatch
):
    from notifications.delivery import drain

    NotificationFactory.create_batch(3, next_attempt_at=None)
    Notification.objects.update(next_attempt_at=DatabaseClock().now())

    def broken(self, group):
        raise RuntimeError("a bug in the finish")

    monkeypatch.setattr(Completer, "finish", broken)
    with pytest.raises(RuntimeError, match="a bug in the finish"):
        drain(enqueue_more=False)
    # Nothing was recorded: the rows stay leased until their lease lapses, then any worker takes them.
    assert not DeliveryAttempt.objects.exists()
    assert set(Notification.objects.values_list("status", flat=True)) == {"pending"}


@pytest.mark.django_db(transaction=True)
def test_finish__a_group_whose_commit_landed_with_its_reply_lost_is_not_finished_again(monkeypatch):
    import notifications.delivery.completer as completer_module
    from notifications.signals import notification_delivered
    from tests.lost_reply import commit_reply_lost

    clock = DatabaseClock()
    rows = _due_and_claimed(clock, 3, owner="done-a")
    answers = [(row, SendResult(outcome=Outcome.DELIVERED, http_status=200, provider_message_id="m")) for row in rows]
    heard = []

    def record(sender, notification, **kwargs):
        heard.append(notification.pk)

    notification_delivered.connect(record, weak=False)
    try:
        with commit_reply_lost(monkeypatch, lambda *a, **k: True, completer_module, "insert_receipts") as lost:
            done = _completer(clock).finish(answers)
    finally:
        notification_delivered.disconnect(record)
    assert lost["fired"] and done.fallback
    # Read back as landed: counted delivered, told once each, one `delivered` attempt per row and no `lease_lost`.
    report = DeliveryReport(owner="done-a")
    count(done, report)
    assert (report.delivered, report.lease_lost) == (3, 0)
    assert sorted(heard) == sorted(row.pk for row in rows)
    attempts = sorted(DeliveryAttempt.objects.values_list("notification_id", "owner", "outcome"))
    assert attempts == sorted((row.pk, "done-a", "delivered") for row in rows)
    assert set(Notification.objects.values_list("status", "owner")) == {("delivered", None)}
