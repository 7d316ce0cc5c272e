"""A device that changes hands takes nothing with it: the previous owner's queued rows end unsent, under the guard."""

import pytest
from django.core.management import call_command

from notifications.delivery import deliver_batch
from notifications.devices import end_unsent
from notifications.explain import explain_notification
from notifications.models import Notification
from notifications.services import device_deactivate, device_register, notification_send_to_user
from weave.leases import LeaseLost

pytestmark = pytest.mark.django_db
TOKEN = "phone-shared-install"


def queued(user, clock):
    (row,) = notification_send_to_user(user=user, title=f"For {user.username} only", body="", clock=clock)
    return row


def test_handover__the_previous_owners_queued_rows_end_unsent_with_the_reason(push_settings, fake, user, bob, clock):
    device = device_register(user=user, backend="default", token=TOKEN, clock=clock)
    for_alice = queued(user, clock)

    device = device_register(user=bob, backend="default", token=TOKEN, clock=clock)
    for_bob = queued(bob, clock)
    report = deliver_batch(clock=clock, owner="worker-a", ttl=30)

    for_alice.refresh_from_db()
    assert device.user == bob and device.owner_changed_at == clock.current
    assert (for_alice.status, for_alice.attempts, for_alice.owner) == ("failed", 0, None)
    assert for_alice.last_error.startswith("Not sent: the device was registered again by another user at ")
    assert f"queued for user {user.pk}" in for_alice.last_error and f"belongs to user {bob.pk}" in for_alice.last_error
    # Only Bob's message reached the phone.
    assert report.delivered == 1 and fake.stats()["requests"] == 1
    assert Notification.objects.get(pk=for_bob.pk).status == "delivered"
    # weave_explain tells why it was never sent.
    summary = explain_notification(for_alice.pk, clock=clock).summary
    assert "never sent" in summary and "registered again by another user" in summary


def test_handover__a_row_a_worker_holds_is_not_overwritten(push_settings, user, bob, clock):
    device_register(user=user, backend="default", token=TOKEN, clock=clock)
    held = queued(user, clock)
    batch = Notification.objects.filter(pk=held.pk).claim_batch(owner="worker-a", ttl=30, limit=1, clock=clock)
    before = Notification.objects.filter(pk=held.pk).values("status", "owner", "fence", "last_error").get()

    device_register(user=bob, backend="default", token=TOKEN, clock=clock)

    after = Notification.objects.filter(pk=held.pk).values("status", "owner", "fence", "last_error").get()
    expected = {"status": "pending", "owner": "worker-a", "fence": batch.fences[held.pk], "last_error": ""}
    assert after == before == expected


def test_end_unsent__the_guarded_write_refuses_a_live_lease_and_changes_no_row(push_settings, user, clock):
    device_register(user=user, backend="default", token=TOKEN, clock=clock)
    held, free = queued(user, clock), queued(user, clock)
    batch = Notification.objects.filter(pk=held.pk).claim_batch(owner="worker-a", ttl=30, limit=1, clock=clock)

    # Both keys handed in, as if picked just before the claim landed: only the free row changes.
    changed = end_unsent([held.pk, free.pk], reason="Not sent: test.", clock=clock)

    assert changed == 1
    rows = dict(Notification.objects.values_list("pk", "status"))
    assert rows == {held.pk: "pending", free.pk: "failed"}
    row = Notification.objects.get(pk=held.pk)
    assert (row.owner, row.fence, row.last_error) == ("worker-a", batch.fences[held.pk], "")
    assert end_unsent([held.pk], reason="Not sent: again.", clock=clock) == 0


def test_handover__a_lapsed_lease_is_ended_and_its_holder_refused_by_its_own_guard(push_settings, user, bob, clock):
    device_register(user=user, backend="default", token=TOKEN, clock=clock)
    row = queued(user, clock)
    batch = Notification.objects.filter(pk=row.pk).claim_batch(owner="worker-a", ttl=30, limit=1, clock=clock)
    clock.advance(31)  # worker-a stalled past its lease

    device_register(user=bob, backend="default", token=TOKEN, clock=clock)

    row.refresh_from_db()
    assert row.status == "failed" and "registered again by another user" in row.last_error
    with pytest.raises(LeaseLost):
        Notification.objects.guarded_update(batch.lease(row.pk), clock=clock, status="delivered")
    row.refresh_from_db()
    assert row.status == "failed"


def test_handover__same_user_or_first_login_ends_nothing(push_settings, user, clock):
    device_register(user=None, backend="default", token=TOKEN, clock=clock)
    device_register(user=user, backend="default", token=TOKEN, clock=clock)  # the install's first login
    row = queued(user, clock)
    device = device_register(user=user, backend="default", token=TOKEN, clock=clock)  # the same user again

    row.refresh_from_db()
    assert row.status == "pending" and device.owner_changed_at is None


def test_handover__signing_out_ends_the_signed_out_users_rows(push_settings, user, clock):
    device_register(user=user, backend="default", token=TOKEN, clock=clock)
    row = queued(user, clock)

    device_register(user=None, backend="default", token=TOKEN, clock=clock)

    row.refresh_from_db()
    assert row.status == "failed" and "now belongs to no user" in row.last_error


def test_deactivate__queued_rows_end_with_the_reason_and_explain_says_so(push_settings, user, clock, capsys):
    device = device_register(user=user, backend="default", token=TOKEN, clock=clock)
    row = queued(user, clock)

    device_deactivate(device=device, reason="user signed out", clock=clock)

    row.refresh_from_db()
    assert row.status == "failed" and row.last_error == "Not sent: the device was deactivated (user signed out)."
    assert "user signed out" in explain_notification(row.pk, clock=clock).summary
    call_command("weave_explain", "notification", str(row.pk))
    assert "user signed out" in capsys.readouterr().out


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_handover__racing_a_send_to_the_previous_owner_still_ends_its_rows(push_settings):
    """The send locks the user's device rows with its insert: a hand-over waits for those rows, then ends them.

    Inside a caller's transaction, whose commit is held back here: the device locks last until it ends
    (taken by the locking read, or on PostgreSQL in the statement that inserts). The one statement
    outside a transaction is raced in test_fanout_race.py."""
    import threading

    from django.contrib.auth import get_user_model
    from django.db import transaction

    from tests.threads import run_threads

    alice, bob = (get_user_model().objects.create_user(name) for name in ("alice", "bob"))
    device_register(user=alice, backend="default", token=TOKEN)
    locked, go = threading.Event(), threading.Event()

    def act(name: str) -> None:
        if name == "send":
            with transaction.atomic():
                notification_send_to_user(user=alice, title="For alice only", body="")
                locked.set()  # the send's rows are in; its transaction, and its device locks, still open
                go.wait(10)
        else:
            assert locked.wait(10)
            timer = threading.Timer(0.5, go.set)  # lets the hand-over run into the lock, if there is one
            timer.start()
            device_register(user=bob, backend="default", token=TOKEN)
            go.set()

    run_threads(act, ["send", "handover"])

    (row,) = Notification.objects.all()
    assert row.status == "failed" and "registered again by another user" in row.last_error
