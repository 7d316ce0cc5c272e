"""The worker over HTTP/2 fakes with wire faults: rows record `unknown` only for requests that reached the peer."""

import uuid

import pytest

from notifications.delivery import deliver_batch
from notifications.models import DeliveryAttempt, Notification
from notifications.testing.fake_apns import live_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def h2_backends(settings, fcm_options, apns_options):
    settings.WEAVE = {
        "PUSH_TIMEOUT": 1.0,  # the deadline that runs out; nothing here asserts a duration
        "PUSH_LEASE_TTL": 30.0,
        "PUSH_CONCURRENCY": 10,
        "PUSH_BACKENDS": {
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options},
            "apns": {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": apns_options},
        },
    }


def make_rows(clock, backend: str, n: int) -> list[Notification]:
    def token() -> str:
        return live_token() if backend == "apns" else f"fcm-{uuid.uuid4().hex}"

    return [
        Notification.objects.create(backend=backend, device_token=token(), title="t", next_attempt_at=clock.current)
        for _ in range(n)
    ]


@pytest.mark.parametrize("alias", ["apns", "fcm"])
def test_a_peer_that_never_finishes_tls__attempts_are_temporary_and_say_nothing_was_sent(
    h2_backends, clock, apns, fcm, alias
):
    fake = {"apns": apns, "fcm": fcm}[alias]
    fake.configure(wire="stall_tls")
    rows = make_rows(clock, alias, 20)

    deliver_batch(clock=clock)

    assert fake.stats()["requests"] == 0 and fake.stats()["wire"]["streams"] == 0
    attempts = DeliveryAttempt.objects.filter(notification__in=rows)
    # The breaker may release the rest of the batch unsent; every attempt made says what happened.
    assert 1 <= attempts.count() <= len(rows)
    assert set(attempts.values_list("outcome", flat=True)) == {"temporary"}
    assert all("nothing was sent" in reason for reason in attempts.values_list("reason", flat=True))
    if alias == "fcm":  # the token endpoint is behind the same stalled door
        assert any("token" in reason for reason in attempts.values_list("reason", flat=True))


def test_refused_streams__no_attempt_is_unknown(h2_backends, clock, apns):
    apns.configure(wire="refuse_streams")
    rows = make_rows(clock, "apns", 20)

    deliver_batch(clock=clock)

    outcomes = set(DeliveryAttempt.objects.filter(notification__in=rows).values_list("outcome", flat=True))
    assert outcomes == {"temporary"} and apns.deliveries() == []


@pytest.mark.parametrize("wire", ["goaway", "max_streams_1"])
def test_hostile_http2_peers__an_attempt_is_unknown_only_if_its_stream_reached_the_peer(h2_backends, clock, apns, wire):
    apns.configure(wire=wire, goaway_after=2, hang_seconds=2.0)
    rows = make_rows(clock, "apns", 20)

    deliver_batch(clock=clock)

    reached = {path.rsplit("/", 1)[-1] for path in apns.stats()["wire"]["paths"]}
    delivered = {d.token for d in apns.deliveries()}
    attempts = DeliveryAttempt.objects.filter(notification__in=rows).select_related("notification")
    assert attempts.exists()
    for attempt in attempts:
        token = attempt.notification.device_token
        if attempt.outcome == "unknown":
            assert token in reached, attempt.reason
        if attempt.outcome == "delivered":
            assert token in delivered, attempt.reason
        if token not in reached:
            assert attempt.outcome == "temporary" and "nothing was" in attempt.reason.lower(), attempt.reason


def test_answers_on_streams_never_opened__no_attempt_is_delivered_and_what_arrived_is_unknown(h2_backends, clock, apns):
    apns.configure(wire="stray_stream")
    rows = make_rows(clock, "apns", 20)

    deliver_batch(clock=clock)

    delivered = {d.token for d in apns.deliveries()}
    attempts = list(DeliveryAttempt.objects.filter(notification__in=rows).select_related("notification"))
    assert attempts and delivered
    assert "delivered" not in {a.outcome for a in attempts}  # no answer is taken from another stream
    for attempt in attempts:
        if attempt.notification.device_token in delivered:
            assert attempt.outcome == "unknown", attempt.reason
