"""The provider-edge checks of the chaos audit flag a wrong answer, an unbacked unknown, a false "nothing was
sent" and a deactivation by someone else's answer, from the rows and the fakes' records alone."""

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.models import DeliveryAttempt, Device, Notification
from tests.factories import NotificationFactory
from tools.chaos.audit import AuditInput, audit

pytestmark = pytest.mark.django_db

T0 = timezone.now() - timedelta(minutes=5)
NOTHING = "Could not reach the provider at 127.0.0.1:9, stopped connecting (ConnectError); nothing was sent."


def _at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def _row(*, status: str = "delivered", message_id: str = "", **fields) -> Notification:
    values = {"fence": 1, "attempts": 1, "next_attempt_at": _at(0), "provider_message_id": message_id, **fields}
    if status == "delivered":
        values["delivered_at"] = _at(1)
    return NotificationFactory(status=status, **values)


def _attempt(row: Notification, outcome: str, *, fence: int = 1, status: int | None = None, reason: str = "", at=0):
    DeliveryAttempt.objects.create(
        notification=row, owner="w", fence=fence, started_at=_at(at), finished_at=_at(at + 0.5),
        outcome=outcome, http_status=status, reason=reason,
    )  # fmt: skip


def _inputs(per_key: dict[str, int], delivered_ids: dict[str, str], **overrides) -> AuditInput:
    log = [{"key": k, "status": 200} for k, n in per_key.items() for _ in range(n)]
    stats = {"requests": len(log), "delivered_keys": sorted(delivered_ids), "per_key": per_key}
    values = {
        "expectations": {},
        "push_stats": {**stats, "delivered_ids": delivered_ids},
        "push_log": log,
        "supplier_stats": {},
        "faults": [],
        "lease_ttl": 4.0,
        "stops_planned": 0,
    }
    return AuditInput(**{**values, **overrides})


def _edge_violations(result) -> set[str]:
    return {c.name for c in result.violations if c.section == "Provider edge"}


def test_edge_audit__rows_holding_their_own_answers_pass():
    a, b = _row(message_id="msg-a"), _row(message_id="msg-b")
    _attempt(a, "delivered", status=200)
    _attempt(b, "delivered", status=200)
    keys = {str(a.idempotency_key): "msg-a", str(b.idempotency_key): "msg-b"}

    result = audit(_inputs({k: 1 for k in keys}, keys))

    assert _edge_violations(result) == set()
    assert result.figures["edge"]["answers"] == {"checked": 2, "without_id": 0}


def test_edge_audit__a_row_holding_another_rows_answer_is_a_violation():
    a, b = _row(message_id="msg-a"), _row(message_id="msg-a")  # b read a's answer (a stray second copy)
    _attempt(a, "delivered", status=200)
    _attempt(b, "delivered", status=200)
    keys = {str(a.idempotency_key): "msg-a", str(b.idempotency_key): "msg-b"}

    result = audit(_inputs({k: 1 for k in keys}, keys))

    assert _edge_violations(result) == {
        "every delivered row holds the answer to its own key",
        "no provider message id on two rows",
    }
    (check,) = [c for c in result.violations if c.name == "every delivered row holds the answer to its own key"]
    assert check.examples == [
        f"#{b.pk} key {b.idempotency_key}: stored 'msg-a', which is the answer for key {a.idempotency_key}"
    ]


def test_edge_audit__unknown_for_a_request_the_provider_never_got_is_a_violation():
    row = _row(status="failed", last_error="gave up")
    _attempt(row, "unknown", reason="Timed out waiting for the answer; the provider may have it.")

    result = audit(_inputs({}, {}))

    assert _edge_violations(result) == {"webhook: unknown (or answered) only where the provider got the request"}
    # The same attempt is honest when the provider did get the request.
    assert _edge_violations(audit(_inputs({str(row.idempotency_key): 1}, {}))) == set()


def test_edge_audit__nothing_was_sent_while_the_provider_got_the_request_is_a_violation():
    row = _row(fence=2, attempts=2, message_id="msg-r")
    _attempt(row, "temporary", reason=NOTHING)
    _attempt(row, "delivered", fence=2, status=200, at=2)
    key = str(row.idempotency_key)

    lying = audit(_inputs({key: 2}, {key: "msg-r"}))
    honest = audit(_inputs({key: 1}, {key: "msg-r"}))

    assert _edge_violations(lying) == {"webhook: 'nothing was sent' only where the provider got nothing"}
    assert _edge_violations(honest) == set()


def test_edge_audit__a_device_deactivated_by_another_devices_answer_is_a_violation(django_user_model):
    user = django_user_model.objects.create(username="edge-audit")
    refused = "FCM UNREGISTERED: the device token is no longer registered."
    dead = Device.objects.create(user=user, backend="fcm", token="dead-1" + "x" * 20)
    other = Device.objects.create(user=user, backend="fcm", token="dead-2" + "x" * 20)
    for device in (dead, other):
        Device.objects.filter(pk=device.pk).update(
            active=False, deactivated_at=_at(2), deactivation_reason=f"The provider refused its token: {refused}"
        )
    # Only `dead`'s own row was refused; `other` has a row that was delivered.
    own = _row(status="failed", backend="fcm", device=dead, last_error=refused)
    _attempt(own, "permanent", status=404, reason=refused)
    theirs = _row(backend="fcm", device=other, message_id="projects/p/messages/1")
    _attempt(theirs, "delivered", status=200)
    fakes = {"fcm": {"requests": 2, "wire": {}}}

    result = audit(_inputs({}, {}, devices={dead.pk: "dead", other.pk: "dead"}, provider_fakes=fakes))

    (check,) = [c for c in result.violations if c.section == "Provider edge"]
    assert check.name == "no device deactivated except by its own row's dead-token answer"
    assert [e.split(":")[0] for e in check.examples] == [f"device #{other.pk}"]


FENCING = "every finished notification written by the row's fence at that time"


@pytest.mark.parametrize("ended_by_deactivation", [True, False])
def test_audit__a_row_released_then_failed_by_its_devices_deactivation_keeps_its_fence(ended_by_deactivation):
    # Fence 1 sent and failed temporarily; fence 2 was claimed and released unsent (a breaker hold); then the
    # device was deactivated by another row's refusal, which fails this free row without a claim.
    from notifications.devices import inactive_reason

    why = inactive_reason("The provider refused its token") if ended_by_deactivation else "gave up"
    row = _row(status="failed", fence=2, last_error=why)
    _attempt(row, "temporary", status=503, reason="FCM UNAVAILABLE")
    key = str(row.idempotency_key)

    result = audit(_inputs({key: 1}, {}))

    assert (FENCING in {c.name for c in result.violations}) is not ended_by_deactivation


RECOVERY = "every row a killed cluster held finished by another"


@pytest.mark.parametrize("ended_by_deactivation", [True, False])
def test_audit__a_killed_holders_row_ended_by_its_devices_deactivation_counts_as_finished(
    django_user_model, ended_by_deactivation
):
    from notifications.devices import inactive_reason
    from tools.chaos.faults import FaultRecord, HeldRow

    user = django_user_model.objects.create(username="edge-recovery")
    device = Device.objects.create(user=user, backend="fcm", token="dead-3" + "x" * 20)
    Device.objects.filter(pk=device.pk).update(active=False, deactivated_at=_at(3), deactivation_reason="gone")
    why = inactive_reason("gone") if ended_by_deactivation else "gave up"
    row = _row(status="failed", backend="fcm", device=device, attempts=0, last_error=why)
    kill = FaultRecord("kill", 1.0, _at(1), "qcluster-1", [HeldRow("notification", row.pk, 1, "push:h:1:x")])

    result = audit(_inputs({}, {}, faults=[kill], devices={device.pk: "dead"}))

    assert (RECOVERY in {c.name for c in result.violations}) is not ended_by_deactivation


H2_LEFT = "HTTP/2: attempts that say a request left never outnumber what the fake got"


@pytest.mark.parametrize(("streams", "flagged"), [(3, False), (2, True)])
def test_edge_audit__h2_streams_cut_short_before_their_handler_still_count_as_arrived(streams, flagged):
    # Under a wire fault, three streams' HEADERS reached the fake: one was handled, one refused, and one
    # was cut short before its handler ran. All three clients honestly say `unknown`.
    for _ in range(3):
        _attempt(_row(status="pending", backend="fcm"), "unknown", reason="no answer before the deadline")
    fakes = {"fcm": {"requests": 1, "wire": {"streams": streams, "handled": 1, "refused": 1}}}

    result = audit(_inputs({}, {}, provider_fakes=fakes))

    assert (H2_LEFT in _edge_violations(result)) is flagged
