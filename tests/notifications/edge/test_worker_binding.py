"""End to end through the worker: real rows, real devices, a hostile HTTP/1.1 peer that speaks out of turn.

The peer echoes each request's Idempotency-Key, so `provider_message_id` names whose answer a row
stored. Before connections were checked for stray bytes, an extra copy of each answer finished 10 of 12
rows with an earlier row's answer and deactivated a healthy device with another row's 410.
"""

import pytest

from notifications.delivery import deliver_batch, drain
from notifications.models import Device, Notification
from tests.notifications.edge.hostile_http11 import HostilePeer

pytestmark = pytest.mark.django_db


def make_rows(clock, n: int = 12) -> list[Notification]:
    rows = []
    for i in range(n):
        token = f"gone-{i}" if i % 4 == 3 else f"tok-{i}"
        device = Device.objects.create(backend="default", token=token)
        rows.append(
            Notification.objects.create(device=device, device_token=token, title=f"n{i}", next_attempt_at=clock.current)
        )
    return rows


def check_rows(rows: list[Notification]) -> None:
    for row in rows:
        row.refresh_from_db()
        device = Device.objects.get(pk=row.device_id)
        if row.device_token.startswith("gone-"):
            assert row.status == Notification.Status.FAILED, (row.device_token, row.last_error)
            assert not device.active, row.device_token
        else:
            assert row.status == Notification.Status.DELIVERED, (row.device_token, row.last_error)
            assert row.provider_message_id == str(row.idempotency_key)
            assert device.active, row.device_token
        assert "garbage" not in row.last_error and "unsolicited" not in row.last_error


@pytest.mark.parametrize("echo", [False, True])
@pytest.mark.parametrize("action", ["extra", "early", "408", "split"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_deliver_batch__each_row_stores_its_own_answer(push_settings, clock, action, concurrency, echo):
    rows = make_rows(clock)
    with HostilePeer(default=action, echo=echo) as peer:
        push_settings["PUSH_URL"] = peer.url
        deliver_batch(clock=clock, concurrency=concurrency)
    check_rows(rows)


def test_drain_over_several_batches__a_short_content_length_never_fails_the_next_row(push_settings, clock):
    rows = make_rows(clock)
    # Every other answer claims a shorter body than it sends; the rest are well framed.
    with HostilePeer(plan=["short", "ok"] * 6) as peer:
        push_settings["PUSH_URL"] = peer.url
        drain(clock=clock, batch_size=4, concurrency=2, enqueue_more=False)
    for row in rows:
        row.refresh_from_db()
        device = Device.objects.get(pk=row.device_id)
        # A cut answer is still this row's own: never another row's key, and no device is lost to it.
        others = {str(r.idempotency_key) for r in rows} - {str(row.idempotency_key)}
        assert not any(key in row.last_error + row.provider_message_id for key in others)
        assert device.active == (not row.device_token.startswith("gone-") or row.status != Notification.Status.FAILED)


@pytest.mark.parametrize("echo", [True, False])
def test_a_gateway_writing_every_answer_twice_5_ms_apart__each_of_40_rows_stores_its_own(push_settings, clock, echo):
    rows = make_rows(clock, 40)
    with HostilePeer(default="late", echo=echo) as peer:
        push_settings["PUSH_URL"] = peer.url
        deliver_batch(clock=clock, concurrency=4)
    check_rows(rows)
    assert len(peer.received) == 40  # one request a row: no row needed a retry to find its own answer
