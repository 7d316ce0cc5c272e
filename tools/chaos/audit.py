"""The invariants of issue 5, checked against the database and the fake servers' records.

Each check returns a `Check`: a section, a name, whether it held, the figure to print and, when it
failed, a few examples. The audit never stops at the first failure: the report shows them all.

Fencing, precisely. A write *lands* when its guarded UPDATE matched the row; the apps record every
landed write with the (owner, fence) of the lease that made it, in the same transaction:
- a notification's `DeliveryAttempt` whose outcome is not `lease_lost`;
- an onboarding `StepReceipt`, and the vendor / payment-terms / bank-account row written with it.
"The fence that wrote it was the row's fence at that time" then means, for every landed write W
with fence f on row r:
1. W's (owner, fence) is a real claim of r: a `RunAttempt` with that owner and fence (onboarding);
   f <= r.fence now (notifications).
2. No newer claim had happened when W landed. Every claim of r at a fence g > f is followed by that
   claimant's own activity, stamped by the database clock; W's time must precede all of it. For a
   run: no `RunAttempt` with fence g > f started before the receipt's `completed_at`. For a
   notification: no attempt with fence g > f started (send start, database clock) before W finished.
   A guarded write takes the row lock, so a claim that follows it waits for its commit: these
   inequalities are strict for correct code.
3. Each claim lands at most one finishing write (a notification is released by it), fences of landed
   writes only grow, a finished row's last landed write carries the row's final fence, and the
   counters equal the landed writes (`attempts` = landed attempts; receipts form the step prefix
   up to `phase`).
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tools.chaos.edge_audit import edge_audit
from tools.chaos.faults import FaultRecord
from tools.chaos.load import EXPECT_COMPLETED, FAILED_STEP, REASON_FRAGMENT

MAX_EXAMPLES = 5
# How the last_error of a row failed by its device's deactivation begins (notifications.devices.inactive_reason).
DEACTIVATED_PREFIX = "Not sent: the device was deactivated"
# A send's start is derived (finish time on the database clock minus the latency measured in whole
# milliseconds), so allow a few milliseconds of rounding before calling a write late. Stale writes
# that matter land seconds late.
SEND_START_TOLERANCE = timedelta(milliseconds=5)


@dataclass
class Check:
    section: str
    name: str
    ok: bool
    figure: str
    examples: list[str] = field(default_factory=list)


@dataclass
class AuditInput:
    expectations: dict[int, str]  # supplier id -> expected end (see load.py)
    push_stats: dict[str, Any]
    push_log: list[dict[str, Any]]
    supplier_stats: dict[str, Any]
    faults: list[FaultRecord]
    lease_ttl: float
    stops_planned: int
    # (step, model label, label) of custom steps' tables; checked when a run's plan has the step.
    step_tables: tuple[tuple[str, str, str], ...] = ()
    # A row a partitioned cluster held must be finished by another within TTL + this of its lease expiry.
    recovery_slack: float = 5.0
    devices: dict[int, str] = field(default_factory=dict)  # device id -> "live" / "dead" (issue 11)
    provider_fakes: dict[str, Any] = field(default_factory=dict)  # fcm / apns / webpush fake stats


@dataclass
class AuditResult:
    checks: list[Check]
    figures: dict[str, Any]

    @property
    def violations(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def _check(section: str, name: str, bad: list[str], figure: str) -> Check:
    return Check(section, name, not bad, figure, bad[:MAX_EXAMPLES])


# --- notifications ---------------------------------------------------------------------------------


def _notifications(inp: AuditInput, checks: list[Check], figures: dict[str, Any]) -> None:
    from notifications.models import DeliveryAttempt, Notification

    rows = {
        r["pk"]: r
        for r in Notification.objects.values(
            "pk", "status", "owner", "fence", "attempts", "last_error", "idempotency_key", "backend"
        )
    }
    attempts: dict[int, list[Any]] = defaultdict(list)  # rows from .values()
    for a in DeliveryAttempt.objects.order_by("finished_at", "pk").values(
        "notification_id", "owner", "fence", "outcome", "started_at", "finished_at"
    ):
        attempts[a["notification_id"]].append(a)
    _notification_states(rows, checks, figures)
    by_key, provider_keys = _provider_deliveries(inp, rows, checks)
    _duplicate_sends(inp, rows, attempts, by_key, provider_keys, checks, figures)
    bad = [problem for pk, row in rows.items() for problem in _notification_fencing(pk, row, attempts.get(pk, []))]
    landed_total = sum(1 for h in attempts.values() for a in h if a["outcome"] != "lease_lost")
    checks.append(
        _check(
            "Fencing",
            "every finished notification written by the row's fence at that time",
            bad,
            f"{landed_total} landed attempts",
        )
    )


def _notification_states(rows: dict[int, Any], checks: list[Check], figures: dict[str, Any]) -> None:
    S = "Notifications"
    status = Counter(r["status"] for r in rows.values())
    figures["notifications"] = dict(status)
    bad = [
        f"#{pk} {r['status']} owner={r['owner']}"
        for pk, r in rows.items()
        if r["status"] not in ("delivered", "failed", "expired") or r["owner"]
    ]
    checks.append(
        _check(
            S,
            "every row delivered, failed or expired, none pending or leased",
            bad,
            f"{len(rows)} rows: {dict(status)}",
        )
    )
    bad = [f"#{pk}" for pk, r in rows.items() if r["status"] == "failed" and not r["last_error"].strip()]
    checks.append(_check(S, "every failed row has a reason", bad, f"{status.get('failed', 0)} failed"))


def _provider_deliveries(inp: AuditInput, rows: dict[int, Any], checks: list[Check]) -> tuple[dict[str, int], set[str]]:
    """Unique deliveries at the provider by Idempotency-Key against delivered rows; return (key -> row, keys)."""
    provider_keys = set(inp.push_stats.get("delivered_keys", []))
    # The webhook fake sees only the "default" backend's rows; device rows go to the FCM/APNs/Web Push fakes.
    webhook_rows = {pk: r for pk, r in rows.items() if r["backend"] == "default"}
    by_key = {str(r["idempotency_key"]): pk for pk, r in webhook_rows.items()}
    delivered_keys = {str(r["idempotency_key"]) for r in webhook_rows.values() if r["status"] == "delivered"}
    missing = [
        f"#{by_key[k]} delivered but the provider never delivered key {k}" for k in delivered_keys - provider_keys
    ]
    extra = [
        f"key {k} delivered at the provider, row #{by_key.get(k, '?')} is "
        f"{rows[by_key[k]]['status'] if k in by_key else 'unknown'}"
        for k in provider_keys - delivered_keys
    ]
    checks.append(
        _check(
            "Notifications",
            "unique deliveries at the provider = delivered rows",
            missing + extra,
            f"{len(provider_keys)} unique keys delivered, {len(delivered_keys)} delivered rows",
        )
    )
    return by_key, provider_keys


def _duplicate_sends(
    inp: AuditInput,
    rows: dict[int, Any],
    attempts: dict[int, list[Any]],
    by_key: dict[str, int],
    provider_keys: set[str],
    checks: list[Check],
    figures: dict[str, Any],
) -> None:
    """Duplicate sends: requests for a key after its first delivery, and what explains each."""
    requests_by_key: dict[str, list[int]] = defaultdict(list)
    for entry in inp.push_log:
        requests_by_key[entry["key"]].append(entry["status"])
    per_key = inp.push_stats.get("per_key", {})
    duplicates = 0
    causes: Counter[str] = Counter()
    bad = []
    for key, statuses in requests_by_key.items():
        if 200 not in statuses:
            continue
        after = len(statuses) - statuses.index(200) - 1
        after += max(0, per_key.get(key, 0) - len(statuses))  # sent but never answered (a restart cut it)
        if not after:
            continue
        duplicates += after
        pk = by_key.get(key, 0)  # 0: no row has this key (primary keys start at 1)
        history = attempts.get(pk, [])
        cause = _duplicate_cause(rows.get(pk), history)
        causes[cause] += after
        if cause == "UNEXPLAINED":
            bad.append(f"#{pk} key {key}: {after} sends after delivery; history: {[a['outcome'] for a in history]}")
    raw = inp.push_stats.get("requests", 0)
    figures["push"] = {
        "raw_requests": raw,
        "unique_deliveries": len(provider_keys),
        "raw_minus_unique": raw - len(provider_keys),
        "duplicate_sends": duplicates,
        "duplicate_causes": dict(causes),
        "by_status": inp.push_stats.get("by_status", {}),
    }
    checks.append(
        _check(
            "Notifications",
            "each duplicate send explained by unknown, lease_lost or a crash",
            bad,
            f"raw {raw} - unique {len(provider_keys)} = {raw - len(provider_keys)}; "
            f"{duplicates} sent after delivery ({dict(causes)})",
        )
    )


def _duplicate_cause(row: Any, history: list[Any]) -> str:
    """What explains a row sending again after a delivery.

    A row only sends again when some worker did not learn of the delivery: the answer was lost
    (unknown), its finish was refused (lease_lost), or it died or stalled between sending and
    recording (a claim that left no attempt row: its fence has no attempt). One such event explains
    every retry that follows it, including retries refused with 429/5xx on the way.
    """
    silent = (row["fence"] if row else 0) - len({a["fence"] for a in history})
    if any(a["outcome"] == "unknown" for a in history):
        return "unknown"
    if any(a["outcome"] == "lease_lost" for a in history):
        return "lease_lost"
    if silent > 0:
        return "crash_or_release"
    return "UNEXPLAINED"


def _notification_fencing(pk: int, row: Any, history: list[Any]) -> list[str]:
    """What is wrong with the fences of one notification's landed attempts."""
    bad = []
    landed = [a for a in history if a["outcome"] != "lease_lost"]
    fences = [a["fence"] for a in landed]
    if fences != sorted(set(fences)):
        bad.append(
            f"notification #{pk}: landed attempts at fences {fences} (one claim wrote twice, or a fence went back)"
        )
    if any(f > row["fence"] for f in fences):
        bad.append(f"notification #{pk}: a landed attempt's fence is above the row's {row['fence']}")
    sent = [a for a in landed if a["outcome"] != "not_sent"]  # a not_sent receipt uses no attempt
    if row["attempts"] != len(sent):
        bad.append(f"notification #{pk}: attempts={row['attempts']} but {len(sent)} landed attempts")
    if row["status"] in ("delivered", "failed") and landed:
        bad += _notification_last_write(pk, row, landed[-1])
    for a in landed:
        later = [
            b for b in history if b["fence"] > a["fence"] and b["started_at"] + SEND_START_TOLERANCE < a["finished_at"]
        ]
        if later:
            b = later[0]
            bad.append(
                f"notification #{pk}: fence {a['fence']} ({a['outcome']}) landed at {a['finished_at']:%H:%M:%S.%f} "
                f"after fence {b['fence']} had started sending at {b['started_at']:%H:%M:%S.%f}"
            )
    return bad


def _notification_last_write(pk: int, row: Any, last: Any) -> list[str]:
    """A finished row's last landed write carries the row's final fence and its outcome."""
    bad = []
    # A device's deactivation fails its free pending rows without a claim or an attempt
    # (notifications.devices.fail_queued_for_device): a row released at a later fence (a breaker
    # hold, a budget) and then ended that way keeps its last fence with no write under it.
    by_deactivation = row["status"] == "failed" and row["last_error"].startswith(DEACTIVATED_PREFIX)
    if last["fence"] != row["fence"] and not by_deactivation:
        bad.append(f"notification #{pk}: finished at fence {row['fence']} by an attempt at fence {last['fence']}")
    if (row["status"] == "delivered") != (last["outcome"] == "delivered"):
        bad.append(f"notification #{pk}: status {row['status']} but last landed outcome {last['outcome']}")
    return bad


# --- onboarding ------------------------------------------------------------------------------------


def _onboarding(inp: AuditInput, checks: list[Check], figures: dict[str, Any]) -> None:
    from onboarding.models import OnboardingRun, RunAttempt, StepReceipt

    runs = {
        r["pk"]: r
        for r in OnboardingRun.objects.values(
            "pk", "supplier_id", "status", "phase", "owner", "fence", "reason", "plan", "reopened", "failed_step"
        )
    }
    plans, custom = _run_plans(runs, checks)
    _run_states(inp, runs, checks, figures)
    receipts: dict[int, list[Any]] = defaultdict(list)  # rows from .values()
    for rc in StepReceipt.objects.order_by("completed_at", "pk").values(
        "run_id", "step", "fence", "owner", "completed_at", "output"
    ):
        receipts[rc["run_id"]].append(rc)
    bad = [problem for pk, r in runs.items() for problem in _receipt_prefix(pk, r, plans[pk], receipts.get(pk, []))]
    total = sum(len(v) for v in receipts.values())
    checks.append(_check("Onboarding", "exactly one receipt per (run, step)", bad, f"{total} receipts"))
    _domain_rows(inp, runs, plans, custom, receipts, checks)
    _service_calls(inp, runs, plans, receipts, checks)

    # Fencing of receipts.
    attempts: dict[int, list[Any]] = defaultdict(list)  # rows from .values()
    for a in RunAttempt.objects.order_by("fence", "pk").values(
        "run_id", "fence", "owner", "started_at", "ended_at", "outcome"
    ):
        attempts[a["run_id"]].append(a)
    bad = [
        problem for pk, r in runs.items() for problem in _run_fencing(pk, r, attempts.get(pk, []), receipts.get(pk, []))
    ]
    checks.append(
        _check("Fencing", "every receipt written by the run's fence at that time", bad, f"{total} receipts audited")
    )
    outcomes = Counter(a["outcome"] for h in attempts.values() for a in h)
    figures["run_attempts"] = dict(outcomes)


def _run_plans(runs: dict[int, Any], checks: list[Check]) -> tuple[dict[int, list[str]], list[str]]:
    """Each run is judged by the plan it recorded when it started, custom steps included."""
    from onboarding.steps.builtin import STEP_NAMES as BUILTIN_NAMES
    from onboarding.steps.plan import DEFAULT_PLAN, PlanError, load_plan

    plans: dict[int, list[str]] = {}
    bad = []
    for pk, r in runs.items():
        try:
            plans[pk] = [step.name for step in load_plan(r["plan"] or DEFAULT_PLAN)]
        except PlanError as exc:
            plans[pk] = []
            bad.append(f"run #{pk}: its recorded plan does not load: {exc}")
    custom = sorted({name for names in plans.values() for name in names} - set(BUILTIN_NAMES))
    checks.append(
        _check(
            "Onboarding",
            "every run's recorded plan loads",
            bad,
            f"custom steps in plans: {', '.join(custom) or 'none'}",
        )
    )
    return plans, custom


def _run_states(inp: AuditInput, runs: dict[int, Any], checks: list[Check], figures: dict[str, Any]) -> None:
    S = "Onboarding"
    status = Counter(r["status"] for r in runs.values())
    figures["runs"] = dict(status)
    bad = [
        f"run #{pk} {r['status']} owner={r['owner']}"
        for pk, r in runs.items()
        if r["status"] not in ("completed", "failed") or r["owner"]
    ]
    checks.append(
        _check(S, "every run completed or failed, none active or leased", bad, f"{len(runs)} runs: {dict(status)}")
    )

    bad = []
    by_supplier = defaultdict(list)
    for pk, r in runs.items():
        by_supplier[r["supplier_id"]].append(pk)
        expect = inp.expectations.get(r["supplier_id"])
        if expect == EXPECT_COMPLETED and r["status"] != "completed":
            bad.append(f"run #{pk} should complete, is {r['status']}: {r['reason'][:120]}")
        elif expect in REASON_FRAGMENT and not (r["status"] == "failed" and REASON_FRAGMENT[expect] in r["reason"]):
            bad.append(f"run #{pk} should fail ({expect}), is {r['status']}: {r['reason'][:120]}")
        elif expect in FAILED_STEP and r["failed_step"] != FAILED_STEP[expect]:
            bad.append(f"run #{pk} should fail at {FAILED_STEP[expect]}, failed at {r['failed_step'] or '-'}")
    bad += [f"supplier {s} has {len(p)} runs" for s, p in by_supplier.items() if len(p) != 1]
    bad += [f"supplier {s} has no run" for s in inp.expectations if s not in by_supplier]
    planned_failures = sum(1 for e in inp.expectations.values() if e != EXPECT_COMPLETED)
    checks.append(
        _check(
            S,
            "failed runs are exactly the business refusals, with the reason, at the step that checks it",
            bad,
            f"{planned_failures} built to fail",
        )
    )


def _receipt_prefix(pk: int, r: Any, plan: list[str], receipts: list[Any]) -> list[str]:
    """A run's receipts are a prefix of its plan, ending at its phase (the whole plan once completed)."""
    bad = []
    steps = [rc["step"] for rc in receipts]
    if steps != plan[: len(steps)]:
        bad.append(f"run #{pk}: receipts {steps} are not a prefix of its plan {plan}")
    if (steps[-1] if steps else "") != r["phase"]:
        bad.append(f"run #{pk}: phase {r['phase']!r} but last receipt {steps[-1] if steps else None!r}")
    if r["status"] == "completed" and len(steps) != len(plan):
        bad.append(f"run #{pk}: completed with {len(steps)} receipts, its plan has {len(plan)} steps")
    return bad


def _domain_rows(
    inp: AuditInput,
    runs: dict[int, Any],
    plans: dict[int, list[str]],
    custom: list[str],
    receipts: dict[int, list[Any]],
    checks: list[Check],
) -> None:
    """Domain rows: one per completed supplier, written by the fence of the matching receipt."""
    from django.apps import apps

    from onboarding.models import BankAccount, PaymentTerms, VendorRecord

    bad: list[str] = []
    tables: list[tuple[str, Any, str]] = [
        ("create_vendor_record", VendorRecord, "vendor"),
        ("set_payment_terms", PaymentTerms, "payment terms"),
        ("register_bank_account", BankAccount, "bank account"),
    ]
    tables += [(step, apps.get_model(model), label) for step, model, label in inp.step_tables if step in custom]
    counts = {}
    for step, model, label in tables:
        written = {row["supplier_id"]: row for row in model.objects.values("supplier_id", "run_id", "fence")}
        counts[label] = len(written)
        for pk, r in runs.items():
            if step in plans[pk]:
                receipt = next((rc for rc in receipts.get(pk, []) if rc["step"] == step), None)
                bad += _domain_row_problems(pk, step, label, receipt, written.get(r["supplier_id"]))
    welcome_count, welcome_bad = _welcome_notifications(runs, receipts)
    bad += welcome_bad
    counts["welcome notifications"] = welcome_count
    checks.append(
        _check(
            "Onboarding",
            "one vendor, payment-terms, bank-account row and welcome notification per completed supplier",
            bad,
            str(counts),
        )
    )


def _domain_row_problems(pk: int, step: str, label: str, receipt: Any, row: Any) -> list[str]:
    if receipt is None and row is not None:
        return [f"run #{pk}: a {label} row without its step's receipt"]
    if receipt is not None and row is None:
        return [f"run #{pk}: {step} receipt but no {label} row"]
    if row is not None and receipt is not None and (row["run_id"], row["fence"]) != (pk, receipt["fence"]):
        return [
            f"run #{pk}: {label} written by run {row['run_id']} fence {row['fence']}, receipt fence {receipt['fence']}"
        ]
    return []


def _welcome_notifications(runs: dict[int, Any], receipts: dict[int, list[Any]]) -> tuple[int, list[str]]:
    """One welcome notification per completed run, the one its last receipt names; return (count, problems)."""
    from notifications.models import Notification

    bad = []
    welcome: dict[int, list[int]] = defaultdict(list)
    for n_pk, data in Notification.objects.filter(data__has_key="onboarding_run_id").values_list("pk", "data"):
        welcome[data["onboarding_run_id"]].append(n_pk)
    for pk, r in runs.items():
        want = 1 if r["status"] == "completed" else 0
        if len(welcome.get(pk, [])) != want:
            bad.append(f"run #{pk} ({r['status']}): {len(welcome.get(pk, []))} welcome notifications")
        last = receipts.get(pk, [])
        if want and last and last[-1]["output"].get("notification_id") not in welcome.get(pk, []):
            bad.append(f"run #{pk}: welcome receipt names notification {last[-1]['output'].get('notification_id')}")
    return sum(len(v) for v in welcome.values()), bad


def _service_calls(
    inp: AuditInput,
    runs: dict[int, Any],
    plans: dict[int, list[str]],
    receipts: dict[int, list[Any]],
    checks: list[Check],
) -> None:
    """External calls: every key the supplier services saw names a real run and an external step, and
    every receipt of an external step has its key there (the work behind it was done at the service)."""
    from onboarding.steps import idempotency_key

    # A step that called out records its key in its receipt (the built-ins do); any step of the plan
    # may call, under the key of (run, step) and, after a re-open, the re-open's number.
    service_keys = set(inp.supplier_stats.get("keys", {}))
    known = {
        idempotency_key(pk, step, n) for pk, r in runs.items() for step in plans[pk] for n in range(r["reopened"] + 1)
    }
    bad = [f"service key {k} names no run step" for k in sorted(service_keys - known)]
    for pk in runs:
        for rc in receipts.get(pk, []):
            key = (rc["output"] or {}).get("idempotency_key")
            if key and key not in service_keys:
                bad.append(f"run #{pk} {rc['step']}: receipt names key {key}, which the service never saw")
    figure = (
        f"{len(service_keys)} keys, {inp.supplier_stats.get('requests', 0)} requests, "
        f"{inp.supplier_stats.get('replays', 0)} answered from the idempotency store"
    )
    checks.append(
        _check("Onboarding", "supplier-service calls keyed by (run, step); each external receipt backed", bad, figure)
    )


def _run_fencing(pk: int, r: Any, history: list[Any], receipts: list[Any]) -> list[str]:
    """What is wrong with the claims of one run and the fences its receipts were written by."""
    claims = Counter(a["fence"] for a in history)
    bad = [f"run #{pk}: {n} attempts at fence {f}" for f, n in claims.items() if n > 1]
    completed = [a for a in history if a["outcome"] == "completed"]
    if r["status"] == "completed" and (len(completed) != 1 or completed[0]["fence"] != r["fence"]):
        bad.append(
            f"run #{pk}: completed at fence {r['fence']}, completed attempts at {[a['fence'] for a in completed]}"
        )
    previous = 0
    for rc in receipts:
        if not any(a["fence"] == rc["fence"] and a["owner"] == rc["owner"] for a in history):
            bad.append(
                f"run #{pk} {rc['step']}: written by {rc['owner']} at fence {rc['fence']}, which never claimed it"
            )
        newer = [a for a in history if a["fence"] > rc["fence"] and a["started_at"] < rc["completed_at"]]
        if newer:
            bad.append(
                f"run #{pk} {rc['step']}: fence {rc['fence']} wrote at {rc['completed_at']:%H:%M:%S.%f} "
                f"after fence {newer[0]['fence']} claimed at {newer[0]['started_at']:%H:%M:%S.%f}"
            )
        if rc["fence"] < previous:
            bad.append(f"run #{pk} {rc['step']}: fence {rc['fence']} after a later step at fence {previous}")
        previous = max(previous, rc["fence"])
    return bad


# --- refusals and recovery -------------------------------------------------------------------------


def _refusals(inp: AuditInput, checks: list[Check], figures: dict[str, Any]) -> None:
    from notifications.models import DeliveryAttempt
    from onboarding.models import RunAttempt

    lease_lost = DeliveryAttempt.objects.filter(outcome="lease_lost").count()
    blocked = RunAttempt.objects.filter(outcome="blocked").count()
    crashed = RunAttempt.objects.filter(outcome="crashed").count()
    unknown = DeliveryAttempt.objects.filter(outcome="unknown").count()
    figures["refusals"] = {"lease_lost": lease_lost, "blocked": blocked, "crashed_runs": crashed, "unknown": unknown}
    exercised = lease_lost + blocked > 0
    figure = f"{lease_lost} lease_lost + {blocked} blocked refused by guards"
    if not exercised:
        figure += " -- ZERO refusals: this run did not exercise the stale-worker path"
    # Only a run that stalled workers must show refusals; a run without stops can honestly have none.
    checks.append(
        Check(
            "Fencing",
            "guards refused stale writes (stale-worker path exercised)",
            exercised or not inp.stops_planned,
            figure,
        )
    )


def _recovery(inp: AuditInput, checks: list[Check], figures: dict[str, Any]) -> None:
    kills = [f for f in inp.faults if f.kind == "kill" and f.db_time is not None]
    per_kill: list[dict[str, Any]] = []
    bad = []
    for record in kills:
        assert record.db_time is not None  # kills were picked for it above
        worst = 0.0
        for held in record.held:
            # The holder's own finishing write (fence == held fence) counts too: the rows were listed a
            # moment before the SIGKILL, and a row its holder finished in that moment needs no recovery.
            first = _first_finish(held)
            if first is None:
                bad.append(
                    f"{held.model} #{held.pk} (fence {held.fence}) held by killed {record.target}: "
                    "never finished by another"
                )
                continue
            worst = max(worst, (first - record.db_time).total_seconds())  # negative: finished before the kill
        per_kill.append({"target": record.target, "held": len(record.held), "max_recovery_s": round(worst, 2)})
    overall = max((k["max_recovery_s"] for k in per_kill), default=0.0)
    figures["recovery"] = {"kills": per_kill, "max_s": overall, "lease_ttl_s": inp.lease_ttl}
    held_total = sum(k["held"] for k in per_kill)
    figure = (
        f"{len(kills)} kills, {held_total} rows held; max recovery {overall:.1f} s "
        f"= {overall / inp.lease_ttl:.1f} x TTL ({inp.lease_ttl:g} s)"
    )
    checks.append(_check("Recovery", "every row a killed cluster held finished by another", bad, figure))


def _first_finish(held: Any) -> Any:
    """Database time of the first write that finished `held`'s row at or after its fence, or None."""
    from notifications.models import DeliveryAttempt
    from onboarding.models import RunAttempt, StepReceipt

    if held.model == "notification":
        times = DeliveryAttempt.objects.filter(notification_id=held.pk, fence__gte=held.fence).exclude(
            outcome="lease_lost"
        )
        first = times.order_by("finished_at").values_list("finished_at", flat=True).first()
        return first if first is not None else _ended_by_deactivation(held.pk)
    first_receipt = (
        StepReceipt.objects.filter(run_id=held.pk, fence__gt=held.fence)
        .order_by("completed_at")
        .values_list("completed_at", flat=True)
        .first()
    )
    first_end = (
        RunAttempt.objects.filter(
            run_id=held.pk, fence__gte=held.fence, outcome__in=["completed", "released", "failed"]
        )
        .order_by("ended_at")
        .values_list("ended_at", flat=True)
        .first()
    )
    return min([t for t in (first_receipt, first_end) if t is not None], default=None)


def _ended_by_deactivation(pk: int) -> Any:
    """When its device's deactivation failed the row (no attempt: see the fencing check), that moment."""
    from notifications.models import Notification

    row = Notification.objects.filter(pk=pk).values("status", "last_error", "device__deactivated_at").first()
    if row and row["status"] == "failed" and row["last_error"].startswith(DEACTIVATED_PREFIX):
        return row["device__deactivated_at"]
    return None


def _partition_recovery(inp: AuditInput, checks: list[Check], figures: dict[str, Any]) -> None:
    """Issue 17: a row held by a cluster cut off from PostgreSQL moves on within TTL + slack of its lease expiry."""
    cuts = [f for f in inp.faults if f.kind == "partition" and f.db_time is not None]
    if not cuts:
        return
    bound = inp.lease_ttl + inp.recovery_slack
    per_cut: list[dict[str, Any]] = []
    bad: list[str] = []
    for record in cuts:
        worst = 0.0
        for held in record.held:
            first = _first_finish(held)
            since = held.expires_at or record.db_time
            if first is None or since is None:
                bad.append(
                    f"{held.model} #{held.pk} (fence {held.fence}) held by cut-off {record.target}: never finished"
                )
                continue
            late = (first - since).total_seconds()  # negative: finished before its lease could expire
            worst = max(worst, late)
            if late > bound:
                bad.append(
                    f"{held.model} #{held.pk} (fence {held.fence}) held by cut-off {record.target}: finished "
                    f"{late:.1f} s after its lease could expire (bound {bound:g} s)"
                )
        per_cut.append({"target": record.target, "held": len(record.held), "max_after_expiry_s": round(worst, 2)})
    overall = max((float(k["max_after_expiry_s"]) for k in per_cut), default=0.0)
    figures["partition_recovery"] = {"partitions": per_cut, "max_s": overall, "bound_s": bound}
    held_total = sum(k["held"] for k in per_cut)
    figure = (
        f"{len(cuts)} partitions, {held_total} rows held; finished at most {overall:.1f} s after their lease "
        f"could expire (bound TTL + {inp.recovery_slack:g} s = {bound:g} s)"
    )
    checks.append(_check("Recovery", "every row a cut-off cluster held moved on within TTL + slack", bad, figure))


def _pg_restart_recovery(inp: AuditInput, checks: list[Check], figures: dict[str, Any]) -> None:
    """A row held when PostgreSQL restarted moves on within TTL + slack of the later of its lease expiry and
    the server's return: its holder finished it, or a later claim started on it. (With django-q2's stock
    ORM broker it cannot: its pusher stops for 10 s after any broker error. weave.broker.ReconnectingORM
    backs off and retries instead.) That every row then finished is checked with the others above."""
    restarts = [f for f in inp.faults if f.kind == "pg_restart" and f.db_time is not None]
    if not restarts:
        return
    bound = inp.lease_ttl + inp.recovery_slack
    per_restart: list[dict[str, Any]] = []
    bad: list[str] = []
    for record in restarts:
        worst = 0.0
        for held in record.held:
            moved = _first_move(held)
            since = max(t for t in (held.expires_at, record.back_at, record.db_time) if t is not None)
            if moved is None:
                bad.append(f"{held.model} #{held.pk} (fence {held.fence}) held at {record.target}: never moved on")
                continue
            late = (moved - since).total_seconds()  # negative: before that
            worst = max(worst, late)
            if late > bound:
                bad.append(
                    f"{held.model} #{held.pk} (fence {held.fence}) held at {record.target}: moved on {late:.1f} s "
                    f"after its lease expired and the server was back (bound {bound:g} s)"
                )
        back = (record.back_at - record.db_time).total_seconds() if record.back_at and record.db_time else None
        per_restart.append(
            {"target": record.target, "held": len(record.held), "away_s": back, "max_after_s": round(worst, 2)}
        )
    overall = max((float(r["max_after_s"]) for r in per_restart), default=0.0)
    figures["pg_restart_recovery"] = {"restarts": per_restart, "max_s": overall, "bound_s": bound}
    held_total = sum(r["held"] for r in per_restart)
    figure = (
        f"{len(restarts)} PostgreSQL restarts, {held_total} rows held; moved on at most {overall:.1f} s after their "
        f"lease expired and the server was back (bound TTL + {inp.recovery_slack:g} s = {bound:g} s)"
    )
    checks.append(_check("Recovery", "every row held when PostgreSQL restarted moved on within the bound", bad, figure))


def _first_move(held: Any) -> Any:
    """Database time `held`'s row moved on: its holder's own finishing write, or the start of a later claim."""
    from notifications.models import DeliveryAttempt
    from onboarding.models import RunAttempt

    if held.model == "notification":
        pushes = DeliveryAttempt.objects.filter(notification_id=held.pk)
        own = pushes.filter(fence=held.fence, finished_at__isnull=False).exclude(outcome="lease_lost")
        own_at = own.order_by("finished_at").values_list("finished_at", flat=True).first()
        later_at = (
            pushes.filter(fence__gt=held.fence).order_by("started_at").values_list("started_at", flat=True).first()
        )
    else:
        runs = RunAttempt.objects.filter(run_id=held.pk)
        ended = runs.filter(fence=held.fence, outcome__in=["completed", "released", "failed"])
        own_at = ended.order_by("ended_at").values_list("ended_at", flat=True).first()
        later_at = runs.filter(fence__gt=held.fence).order_by("started_at").values_list("started_at", flat=True).first()
    return min([t for t in (own_at, later_at) if t is not None], default=None)


# --- devices, pruning and expiry (issue 11) -------------------------------------------------------------


def _devices(inp: AuditInput, checks: list[Check], figures: dict[str, Any]) -> None:
    """Pruning happened exactly for dead tokens and only behind a landed guard; nothing went out expired."""
    from notifications.models import DeliveryAttempt, Device, Notification

    S = "Devices and expiry"
    devices = {
        d["pk"]: d for d in Device.objects.values("pk", "backend", "active", "deactivated_at", "deactivation_reason")
    }
    rows = {
        r["pk"]: r
        for r in Notification.objects.filter(device__isnull=False).values(
            "pk", "device_id", "status", "expires_at", "last_error"
        )
    }
    landed: dict[int, list[Any]] = defaultdict(list)  # device id -> landed attempts on its rows
    late_sends, bad_expired = [], []
    # Sends only: a not_sent receipt records an ending without a send.
    attempts = DeliveryAttempt.objects.filter(notification_id__in=list(rows)).exclude(
        outcome__in=["lease_lost", "not_sent"]
    )
    for a in attempts.values("notification_id", "outcome", "started_at", "finished_at", "reason", "fence"):
        row = rows[a["notification_id"]]
        landed[row["device_id"]].append(a)
        # The send's start is the worker's estimate of the database time; allow its rounding.
        expires_at = row["expires_at"]
        if expires_at is not None and a["started_at"] > expires_at + SEND_START_TOLERANCE:
            late_sends.append(
                f"notification #{row['pk']}: sent at {a['started_at']:%H:%M:%S.%f}, expired at "
                f"{row['expires_at']:%H:%M:%S.%f} (fence {a['fence']}, {a['outcome']})"
            )
    checks.append(_check(S, "nothing sent after its expires_at", late_sends, f"{len(late_sends)} late sends"))
    for pk, row in rows.items():
        if row["status"] != "expired":
            continue
        if row["expires_at"] is None or not row["last_error"].startswith("Expired at"):
            bad_expired.append(f"notification #{pk}: expired without an expiry or its reason: {row['last_error']!r}")
        if any(a["outcome"] == "delivered" for a in landed.get(row["device_id"], []) if a.get("notification_id") == pk):
            bad_expired.append(f"notification #{pk}: expired, yet a landed attempt delivered it")
    expired = sum(1 for r in rows.values() if r["status"] == "expired")
    checks.append(_check(S, "every expired row has its expiry and reason, and was never delivered", bad_expired,
                         f"{expired} expired rows"))  # fmt: skip

    wrongly, missed, unbacked, after = _deactivations(inp, devices, landed)
    inactive = sum(1 for d in devices.values() if not d["active"])
    dead = sum(1 for v in inp.devices.values() if v == "dead")
    figures["devices"] = {
        "devices": len(devices),
        "dead_tokens": dead,
        "deactivated": inactive,
        "expired_rows": expired,
    }
    checks.append(
        _check(S, "no device with a live token deactivated", wrongly, f"{inactive} of {len(devices)} deactivated")
    )
    checks.append(
        _check(S, "every dead device a refusal reached is deactivated", missed, f"{dead} dead tokens planned")
    )
    checks.append(_check(S, "each deactivation follows a landed token refusal (same transaction)", unbacked,
                         f"{inactive} deactivations"))  # fmt: skip
    checks.append(_check(S, "no send to a device more than one lease after its deactivation", after,
                         f"{len(after)} late sends"))  # fmt: skip
    if inp.provider_fakes:
        figures["provider_fakes"] = {
            name: {"requests": st.get("requests"), "delivered": st.get("delivered"), "by_reason": st.get("by_reason"),
                   "connections": st.get("connections")}
            for name, st in inp.provider_fakes.items()
        }  # fmt: skip


def _deactivations(
    inp: AuditInput, devices: dict[int, Any], landed: dict[int, list[Any]]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Per planned device: (live ones deactivated, dead ones refused yet active, deactivations with no
    landed refusal before them, sends more than one lease after a deactivation)."""
    wrongly: list[str] = []
    missed: list[str] = []
    unbacked: list[str] = []
    after: list[str] = []
    for pk, plan in inp.devices.items():
        device = devices.get(pk)
        if device is None:
            continue
        history = landed.get(pk, [])
        refusals = [a for a in history if a["outcome"] == "permanent"]
        if plan == "live" and not device["active"]:
            wrongly.append(
                f"device #{pk} ({device['backend']}, live token) deactivated: {device['deactivation_reason']}"
            )
        if plan == "dead" and refusals and device["active"]:
            missed.append(f"device #{pk} ({device['backend']}): {len(refusals)} token refusals landed, still active")
        if not device["active"]:
            deactivated_at = device["deactivated_at"]
            if deactivated_at is None:
                unbacked.append(f"device #{pk}: inactive without a deactivation time")
                continue
            # Deactivated in the transaction of a landed finish: that attempt was written first.
            if not any(a["finished_at"] <= deactivated_at for a in refusals):
                unbacked.append(
                    f"device #{pk}: deactivated at {device['deactivated_at']} with no landed refusal before"
                )
            # Rows already claimed when another worker pruned the device may still go out, within one lease.
            window = timedelta(seconds=inp.lease_ttl)
            for a in history:
                if a["started_at"] > deactivated_at + window:
                    after.append(f"device #{pk}: a row sent at {a['started_at']} long after deactivation")
    return wrongly, missed, unbacked, after


def audit(inp: AuditInput) -> AuditResult:
    """Run every check; never raises for a violation (the result lists them)."""
    checks: list[Check] = []
    figures: dict[str, Any] = {}
    _notifications(inp, checks, figures)
    _onboarding(inp, checks, figures)
    _refusals(inp, checks, figures)
    _recovery(inp, checks, figures)
    _partition_recovery(inp, checks, figures)
    _pg_restart_recovery(inp, checks, figures)
    if inp.devices:
        _devices(inp, checks, figures)
    checks += [_check(*found) for found in edge_audit(inp, figures)]
    order = {"Notifications": 0, "Devices and expiry": 1, "Provider edge": 2, "Onboarding": 3, "Fencing": 4}
    order["Recovery"] = 5
    checks.sort(key=lambda c: order[c.section])
    return AuditResult(checks=checks, figures=figures)
