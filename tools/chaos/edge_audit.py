"""The provider-edge invariants, checked against the database and the fakes' own records.

- Every delivered row's stored provider message id is the one the provider answered for that row's
  own idempotency key (`delivered_ids` in the webhook fake's stats), and no id sits on two rows.
- An attempt that says something may have left (`unknown`, or any answer with an HTTP status) is
  backed by a request the fake received for that key: per key, such attempts never outnumber the
  requests the fake counted (a fake restart can lose the count of a request it was serving, so
  attempts that overlap a restart are not counted).
- An attempt that says "nothing was sent" (or that the provider did not process it) matches no
  request: per key, the fake never counted more requests than the attempts that may have sent, plus
  claims that left no attempt (a worker killed or cut off between sending and recording).
- The same two counts per HTTP/2 backend, over all its rows (the HTTP/2 fakes count requests per
  fake, not per key).
- No device is deactivated except by its own row's dead-token answer: a device planned dead, and a
  landed refusal on one of its own rows, written before the deactivation, whose reason it carries.
"""

from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any

from tools.chaos.edge import h2_effects

# audit.py calls in here with its AuditInput and turns each finding into one of its checks (this module
# cannot import audit.py: no import cycles between the chaos kit's modules).
AuditInput = Any
# (section, invariant, examples of where it failed (none: it held), figure)
Check = tuple[str, str, list[str], str]


def _check(section: str, name: str, bad: list[str], figure: str) -> Check:
    return (section, name, bad, figure)


SECTION = "Provider edge"
# What a send that never reached the provider's handler says (see notifications.backends.classify).
NOTHING_SENT = ("nothing was sent", "nothing was delivered")


def nothing_sent(attempt: dict[str, Any]) -> bool:
    return attempt["outcome"] == "temporary" and any(text in (attempt["reason"] or "") for text in NOTHING_SENT)


def claims_a_request(attempt: dict[str, Any]) -> bool:
    """The attempt says the provider got (some of) the request: an answer came, or it is `unknown`."""
    if attempt["outcome"] in ("lease_lost", "not_sent") or nothing_sent(attempt):
        return False
    return attempt["outcome"] == "unknown" or attempt["http_status"] is not None


def unsolicited_408(attempt: dict[str, Any]) -> bool:
    """A 408 may be the fake's unsolicited one, written to an idle connection the instant our request left
    on it: on the wire that is indistinguishable from an answer, and the fake never reads the request.
    A 408 says the request was not taken, so it is only ever `temporary`."""
    return attempt["outcome"] == "temporary" and attempt["http_status"] == 408


def may_have_sent(attempt: dict[str, Any]) -> bool:
    return attempt["outcome"] != "not_sent" and not nothing_sent(attempt)


def _restart_windows(inp: AuditInput) -> list[tuple[datetime, datetime]]:
    windows = []
    for f in inp.faults:
        if f.kind == "restart" and f.db_time is not None:
            length = (f.resumed_at - f.at) if f.resumed_at is not None else 30.0
            windows.append((f.db_time, f.db_time + timedelta(seconds=length + 1)))
    return windows


def _overlaps(attempt: dict[str, Any], windows: list[tuple[datetime, datetime]]) -> bool:
    end = attempt["finished_at"] or attempt["started_at"]
    return any(attempt["started_at"] <= w_end and end >= w_start for w_start, w_end in windows)


def _load() -> tuple[dict[int, dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    from notifications.models import DeliveryAttempt, Notification

    rows: dict[int, dict[str, Any]] = {
        r["pk"]: dict(r)
        for r in Notification.objects.values(
            "pk", "backend", "status", "idempotency_key", "provider_message_id", "fence", "device_id"
        )
    }
    attempts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for a in DeliveryAttempt.objects.order_by("started_at", "pk").values(
        "notification_id", "outcome", "reason", "http_status", "fence", "started_at", "finished_at"
    ):
        attempts[a["notification_id"]].append(dict(a))
    return rows, attempts


def _silent(row: dict[str, Any], history: list[dict[str, Any]]) -> int:
    """Claims of the row that left no attempt (see the duplicate-send check in audit.py)."""
    return max(0, row["fence"] - len({a["fence"] for a in history}))


def _answers_own_rows(inp: AuditInput, rows: dict[int, dict[str, Any]], checks: list[Check]) -> dict[str, int]:
    answered: dict[str, str] = inp.push_stats.get("delivered_ids", {})
    owner_of_id = {message_id: key for key, message_id in answered.items()}
    bad, checked, without = [], 0, 0
    for pk, r in rows.items():
        if r["backend"] != "default" or r["status"] != "delivered":
            continue
        stored, key = r["provider_message_id"], str(r["idempotency_key"])
        if not stored:
            without += 1
            continue
        checked += 1
        if stored != answered.get(key):
            whose = owner_of_id.get(stored)
            said = f"the answer for key {whose}" if whose else "an id the provider never answered"
            bad.append(f"#{pk} key {key}: stored {stored!r}, which is {said}")
    figure = f"{checked} delivered webhook rows checked against the provider's answers ({without} without an id)"
    checks.append(_check(SECTION, "every delivered row holds the answer to its own key", bad, figure))

    ids = Counter(
        r["provider_message_id"] for r in rows.values() if r["status"] == "delivered" and r["provider_message_id"]
    )
    shared = [f"id {message_id!r} on {n} rows" for message_id, n in ids.items() if n > 1]
    checks.append(_check(SECTION, "no provider message id on two rows", shared, f"{len(ids)} distinct ids"))
    return {"checked": checked, "without_id": without}


def _webhook_sends(
    inp: AuditInput, rows: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]], checks: list[Check]
) -> dict[str, int]:
    received: dict[str, int] = inp.push_stats.get("per_key", {})
    windows = _restart_windows(inp)
    unbacked, sent_after_all, counts = [], [], Counter[str]()
    # With idle 408s on, a temporary 408 is not counted as a request the provider got (see unsolicited_408).
    idle_408s = bool(inp.push_stats.get("unsolicited"))
    for pk, r in rows.items():
        if r["backend"] != "default":
            continue
        key, history = str(r["idempotency_key"]), attempts.get(pk, [])
        got = received.get(key, 0)
        claimed = [a for a in history if claims_a_request(a) and not _overlaps(a, windows)]
        if idle_408s:
            counts["temporary_408"] += sum(1 for a in claimed if unsolicited_408(a))
            claimed = [a for a in claimed if not unsolicited_408(a)]
        quiet = [a for a in history if nothing_sent(a)]
        counts["unknown"] += sum(1 for a in history if a["outcome"] == "unknown")
        counts["nothing_sent"] += len(quiet)
        if len(claimed) > got:
            kinds = Counter(f"{a['outcome']} {a['http_status'] or ''}".strip() for a in claimed)
            unbacked.append(
                f"#{pk} key {key}: {len(claimed)} attempts say it left ({dict(kinds)}), the provider got {got}"
            )
        bound = sum(1 for a in history if may_have_sent(a)) + _silent(r, history)
        if quiet and got > bound:
            sent_after_all.append(
                f"#{pk} key {key}: the provider got {got} requests, only {bound} claims may have sent; "
                f"{len(quiet)} said {quiet[0]['reason']!r}"
            )
    checks.append(
        _check(SECTION, "webhook: unknown (or answered) only where the provider got the request", unbacked,
               f"{counts['unknown']} unknown attempts on webhook rows, {counts['temporary_408']} 408s not counted")
    )  # fmt: skip
    checks.append(
        _check(SECTION, "webhook: 'nothing was sent' only where the provider got nothing", sent_after_all,
               f"{counts['nothing_sent']} nothing-sent attempts on webhook rows")
    )  # fmt: skip
    return dict(counts)


def _h2_sends(
    inp: AuditInput, rows: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]], checks: list[Check]
) -> dict[str, dict[str, int]]:
    per_backend: dict[str, dict[str, int]] = {}
    unbacked, sent_after_all = [], []
    for name, stats in inp.provider_fakes.items():
        got = int(stats.get("requests") or 0)  # requests its handler took
        # A connection under a wire fault is counted at the frame level: every stream whose HEADERS arrived
        # reached the peer, whether it was answered, refused (REFUSED_STREAM, above a GOAWAY) or cut short
        # before its handler ran. Any of those whose end came after the client's deadline is honestly
        # `unknown`. The handler's count covers the connections that had no fault.
        wire = stats.get("wire") or {}
        arrived = got - int(wire.get("handled") or 0) + int(wire.get("streams") or 0)
        mine = [(r, attempts.get(pk, [])) for pk, r in rows.items() if r["backend"] == name]
        claimed = sum(1 for _, h in mine for a in h if claims_a_request(a))
        quiet = sum(1 for _, h in mine for a in h if nothing_sent(a))
        bound = sum(sum(1 for a in h if may_have_sent(a)) + _silent(r, h) for r, h in mine)
        unknown = sum(1 for _, h in mine for a in h if a["outcome"] == "unknown")
        per_backend[name] = {"fake_requests": got, "arrived": arrived, "claimed": claimed, "unknown": unknown,
                             "nothing_sent": quiet}  # fmt: skip
        if claimed > arrived:
            unbacked.append(
                f"{name}: {claimed} attempts say a request left ({unknown} unknown), {arrived} reached the fake"
            )
        if quiet and got > bound:
            sent_after_all.append(
                f"{name}: the fake got {got} requests, only {bound} claims may have "
                f"sent ({quiet} said nothing was sent)"
            )
    figure = ", ".join(f"{n}: {v['claimed']} claimed / {v['arrived']} arrived" for n, v in per_backend.items())
    checks.append(_check(SECTION, "HTTP/2: attempts that say a request left never outnumber what the fake got",
                         unbacked, figure or "no HTTP/2 fakes"))  # fmt: skip
    figure = ", ".join(f"{n}: {v['nothing_sent']} nothing-sent" for n, v in per_backend.items())
    checks.append(_check(SECTION, "HTTP/2: the fake got no more than the claims that may have sent",
                         sent_after_all, figure or "no HTTP/2 fakes"))  # fmt: skip
    return per_backend


def _deactivations(
    inp: AuditInput, rows: dict[int, dict[str, Any]], attempts: dict[int, list[dict[str, Any]]], checks: list[Check]
) -> None:
    from notifications.models import Device

    refusals: dict[int, list[dict[str, Any]]] = defaultdict(list)  # device -> permanent answers on its own rows
    for pk, r in rows.items():
        if r["device_id"] is not None:
            refusals[r["device_id"]] += [a for a in attempts.get(pk, []) if a["outcome"] == "permanent"]
    bad = []
    inactive = Device.objects.filter(active=False).values("pk", "deactivated_at", "deactivation_reason")
    for d in inactive:
        own = [
            a
            for a in refusals.get(d["pk"], [])
            if d["deactivated_at"] is not None
            and a["finished_at"] is not None
            and a["finished_at"] <= d["deactivated_at"]
        ]
        if inp.devices.get(d["pk"]) != "dead":
            bad.append(f"device #{d['pk']}: its token is live, yet it was deactivated ({d['deactivation_reason']!r})")
        elif not any(a["reason"] and a["reason"] in d["deactivation_reason"] for a in own):
            bad.append(
                f"device #{d['pk']}: deactivated with {d['deactivation_reason']!r}, "
                "which no refusal of its own rows said"
            )
    checks.append(_check(SECTION, "no device deactivated except by its own row's dead-token answer", bad,
                         f"{len(inactive)} deactivations traced to their own rows"))  # fmt: skip


def edge_audit(inp: AuditInput, figures: dict[str, Any]) -> list[Check]:
    """Every provider-edge finding; the figures go into `figures["edge"]`."""
    checks: list[Check] = []
    rows, attempts = _load()
    answers = _answers_own_rows(inp, rows, checks)
    webhook = _webhook_sends(inp, rows, attempts, checks)
    h2 = _h2_sends(inp, rows, attempts, checks) if inp.provider_fakes else {}
    if inp.devices:
        _deactivations(inp, rows, attempts, checks)
    ran = [f for f in inp.faults if f.kind == "edge" and f.db_time is not None]
    figures["edge"] = {
        "faults": len(ran),
        "webhook_modes": sorted({f.modes[0] for f in ran if f.modes[0]}),
        "h2_modes": sorted({f.modes[1] for f in ran if f.modes[1]}),
        "answers": answers,
        "webhook": {
            **webhook,
            "unsolicited_408": inp.push_stats.get("unsolicited", 0),
            "by_status": inp.push_stats.get("by_status", {}),
        },
        "h2": h2,
        "h2_effects": h2_effects(inp.provider_fakes) if inp.provider_fakes else {},
    }
    return checks
