"""The webhook fake's out-of-turn answers and losses before delivery, through the worker and the backend.

The fake names its own message id per idempotency key, so `provider_message_id` shows whose answer a row
stored. These modes are what the chaos run and other tests can mix in.
"""

import asyncio
import time
import uuid

import pytest

from notifications.backends.base import Outcome, PushMessage
from notifications.backends.webhook import WebhookBackend
from notifications.delivery import deliver_batch, drain
from notifications.models import DeliveryAttempt, Notification
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db


def rows(clock, n: int = 12) -> list[Notification]:
    return [NotificationFactory(next_attempt_at=clock.current) for _ in range(n)]


def own_answers(fake, notifications) -> None:
    ids = fake.stats()["delivered_ids"]
    for row in notifications:
        row.refresh_from_db()
        assert row.status == Notification.Status.DELIVERED, row.last_error
        assert row.provider_message_id == ids[str(row.idempotency_key)]


@pytest.mark.parametrize("mode", [{"extra_answers": 1}, {"extra_answers": 2}, {"early_answer": True}])
def test_answers_out_of_turn__each_row_keeps_its_own(push_settings, fake, clock, mode):
    fake.configure(**mode)
    made = rows(clock)

    deliver_batch(clock=clock, concurrency=3)

    own_answers(fake, made)


def test_a_short_content_length__no_row_is_finished_with_the_tail(push_settings, fake, clock):
    fake.configure(content_length_delta=-3)
    made = rows(clock)

    deliver_batch(clock=clock, concurrency=3)

    ids = fake.stats()["delivered_ids"]
    for row in made:
        row.refresh_from_db()
        others = set(ids.values()) - {ids.get(str(row.idempotency_key))}
        assert not any(other in row.last_error + row.provider_message_id for other in others)
        # Its own answer, cut: delivered without a readable id.
        assert row.status == Notification.Status.DELIVERED


def test_an_unsolicited_408_on_an_idle_connection__the_next_send_is_answered_by_its_own_request(fake):
    fake.configure(idle_408_seconds=0.2)
    hook = WebhookBackend(alias="default", options={"url": fake.push_url}, timeout=5.0, concurrency=1)
    first, second = (PushMessage(idempotency_key=str(uuid.uuid4()), token="t", title="a", body="b") for _ in "12")

    async def scenario():
        try:
            one = await hook.send(first)
            waited_until = time.monotonic() + 10
            while fake.stats()["unsolicited"] == 0 and time.monotonic() < waited_until:
                await asyncio.sleep(0.02)  # until the fake has written its 408 (an event, not a latency)
            return one, await hook.send(second)
        finally:
            await hook.aclose()

    one, two = asyncio.run(scenario())

    assert fake.stats()["unsolicited"] >= 1
    ids = fake.stats()["delivered_ids"]
    assert (one.outcome, two.outcome) == (Outcome.DELIVERED, Outcome.DELIVERED)
    assert two.provider_message_id == ids[second.idempotency_key]


@pytest.mark.parametrize("mode", [{"rate_drop_before": 1.0}, {"rate_hang_before": 1.0, "hang_seconds": 2.5}])
def test_lost_before_delivery__unknown_and_then_delivered_once(push_settings, fake, clock, mode):
    push_settings["PUSH_TIMEOUT"] = 1.0
    fake.configure(**mode)
    made = rows(clock, 4)

    deliver_batch(clock=clock, concurrency=4)

    assert fake.stats()["unique_deliveries"] == 0
    outcomes = set(DeliveryAttempt.objects.values_list("outcome", flat=True))
    assert outcomes == {"unknown"}
    fake.configure(rate_drop_before=0.0, rate_hang_before=0.0)
    clock.advance(3600)
    drain(clock=clock, enqueue_more=False)
    own_answers(fake, made)
    assert fake.stats()["unique_deliveries"] == len(made)
