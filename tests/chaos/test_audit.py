"""The chaos audit flags a stale write that landed, from the rows alone (no processes, both databases)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.models import DeliveryAttempt, Notification
from onboarding.models import RunAttempt, StepReceipt
from onboarding.steps.builtin import STEP_NAMES
from tests.factories import NotificationFactory, OnboardingRunFactory
from tools.chaos.audit import AuditInput, audit
from tools.chaos.faults import FaultRecord, HeldRow

pytestmark = pytest.mark.django_db

T0 = timezone.now() - timedelta(minutes=5)


def _at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def _delivered(*, stale_write_lands: bool) -> Notification:
    """A notification claimed at fence 1 by A (who stalls) and fence 2 by B, who delivers it."""
    row = NotificationFactory(status="delivered", fence=2, attempts=1, delivered_at=_at(3), next_attempt_at=_at(0))
    DeliveryAttempt.objects.create(
        notification=row, owner="B", fence=2, started_at=_at(2), finished_at=_at(3), outcome="delivered"
    )
    # A wakes up after B started sending. Correct code refuses A's finish (lease_lost); a broken guard lets it land.
    outcome = "delivered" if stale_write_lands else "lease_lost"
    DeliveryAttempt.objects.create(
        notification=row, owner="A", fence=1, started_at=_at(0.5), finished_at=_at(4), outcome=outcome
    )
    return row


def _inputs(rows: list[Notification], **overrides) -> AuditInput:
    keys = [str(r.idempotency_key) for r in rows]
    log = [{"key": k, "status": 200} for k in keys] * 2  # each key sent twice: A's send and B's
    values = {
        "expectations": {},
        "push_stats": {"requests": len(log), "delivered_keys": keys, "per_key": {k: 2 for k in keys}},
        "push_log": log,
        "supplier_stats": {},
        "faults": [],
        "lease_ttl": 4.0,
        "stops_planned": 1,
    }
    return AuditInput(**{**values, **overrides})


def _failed(result) -> set[str]:
    return {c.name for c in result.violations}


def test_audit__a_refused_stale_finish_passes_every_check():
    row = _delivered(stale_write_lands=False)

    result = audit(_inputs([row]))

    assert result.violations == []
    assert result.figures["refusals"]["lease_lost"] == 1
    assert result.figures["push"]["duplicate_causes"] == {"lease_lost": 1}


def test_audit__a_stale_finish_that_landed_is_a_fencing_violation():
    row = _delivered(stale_write_lands=True)
    row.attempts = 2
    row.save()

    result = audit(_inputs([row]))

    assert _failed(result) == {
        "every finished notification written by the row's fence at that time",
        # A's send is a duplicate with nothing in the history to explain it, and no guard refused anything.
        "each duplicate send explained by unknown, lease_lost or a crash",
        "guards refused stale writes (stale-worker path exercised)",
    }
    (fencing,) = [c for c in result.violations if c.section == "Fencing" and "notification" in c.name]
    assert any("finished at fence 2 by an attempt at fence 1" in e for e in fencing.examples)
    assert any("after fence 2 had started sending" in e for e in fencing.examples)


def test_audit__a_receipt_written_after_a_newer_claim_is_a_fencing_violation():
    run = OnboardingRunFactory(status="failed", phase=STEP_NAMES[0], fence=2, reason="Tax id is invalid: test.")
    RunAttempt.objects.create(run=run, owner="A", fence=1, started_at=_at(0), ended_at=_at(6), outcome="blocked")
    RunAttempt.objects.create(run=run, owner="B", fence=2, started_at=_at(4), ended_at=_at(7), outcome="failed")
    StepReceipt.objects.create(run=run, step=STEP_NAMES[0], owner="A", fence=1, completed_at=_at(5))

    result = audit(_inputs([], expectations={run.supplier_id: "invalid_tax_id"}))

    (check,) = [c for c in result.violations if c.name == "every receipt written by the run's fence at that time"]
    assert "after fence 2 claimed" in check.examples[0]


def test_audit__a_row_a_killed_cluster_held_must_be_finished_by_another_claim():
    row = NotificationFactory(status="pending", fence=1, owner=None, next_attempt_at=_at(0))
    kill = FaultRecord("kill", 1.0, _at(1), "qcluster-1", [HeldRow("notification", row.pk, 1, "push:h:1:x")])

    result = audit(_inputs([], faults=[kill], stops_planned=0))

    assert _failed(result) == {
        "every row delivered, failed or expired, none pending or leased",
        "every row a killed cluster held finished by another",
    }


def _erp_run(*, row_fence: int):
    """A completed run whose plan has the demo's ERP step; its ERP row is stamped with `row_fence`."""
    from demo.models import ErpVendor
    from onboarding.steps.plan import DEFAULT_PLAN
    from tools.chaos.config import ChaosConfig

    plan = list(ChaosConfig().steps)
    names = [*STEP_NAMES[:3], "create_erp_vendor", *STEP_NAMES[3:]]
    assert len(plan) == len(DEFAULT_PLAN) + 1
    run = OnboardingRunFactory(status="completed", phase=names[-1], fence=1, plan=plan)
    RunAttempt.objects.create(run=run, owner="A", fence=1, started_at=_at(0), ended_at=_at(9), outcome="completed")
    for i, name in enumerate(names):
        StepReceipt.objects.create(run=run, step=name, owner="A", fence=1, completed_at=_at(1 + i))
    ErpVendor.objects.create(supplier=run.supplier, erp_code="ERP-1", run=run, fence=row_fence, created_at=_at(5))
    return run


@pytest.mark.parametrize("row_fence", [1, 7])
def test_audit__a_custom_steps_row_must_be_written_by_its_receipts_fence(row_fence):
    from tools.chaos.config import ChaosConfig

    run = _erp_run(row_fence=row_fence)
    result = audit(_inputs([], expectations={run.supplier_id: "completed"}, step_tables=ChaosConfig().step_tables))
    (prefix,) = [c for c in result.checks if c.name == "exactly one receipt per (run, step)"]
    assert prefix.ok  # seven receipts are the whole of this run's recorded plan
    rows = [c for c in result.violations if c.name.startswith("one vendor")]
    if row_fence == 1:
        assert not any("ERP vendor" in e for c in rows for e in c.examples)
    else:
        assert any(f"ERP vendor (custom step) written by run {run.pk} fence 7" in e for e in rows[0].examples)


def test_audit__a_row_a_cut_off_cluster_held_must_move_on_within_ttl_and_slack():
    on_time = NotificationFactory(status="delivered", fence=2, attempts=1, delivered_at=_at(9), next_attempt_at=_at(0))
    DeliveryAttempt.objects.create(
        notification=on_time, owner="B", fence=2, started_at=_at(8), finished_at=_at(9), outcome="delivered"
    )
    late = NotificationFactory(status="delivered", fence=2, attempts=1, delivered_at=_at(30), next_attempt_at=_at(0))
    DeliveryAttempt.objects.create(
        notification=late, owner="B", fence=2, started_at=_at(29), finished_at=_at(30), outcome="delivered"
    )
    held = [
        HeldRow("notification", on_time.pk, 1, "push:h:1:x", expires_at=_at(5)),
        HeldRow("notification", late.pk, 1, "push:h:1:x", expires_at=_at(5)),
    ]
    cut = FaultRecord("partition", 1.0, _at(1), "qcluster-1", held)

    result = audit(_inputs([on_time, late], faults=[cut], stops_planned=0, lease_ttl=4.0, recovery_slack=5.0))

    (check,) = [c for c in result.violations if c.name.startswith("every row a cut-off cluster held")]
    assert f"#{late.pk}" in check.examples[0] and "25.0 s after its lease could expire" in check.examples[0]
    assert not any(f"#{on_time.pk}" in example for example in check.examples)
    assert result.figures["partition_recovery"]["max_s"] == 25.0
