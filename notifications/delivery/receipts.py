"""Write a group's attempt receipts with ONE multi-row INSERT, built without model instances.

`bulk_create` builds a model instance per row and compiles every value through the ORM; for a group
of receipts that cost more CPU than the statement took to run. The columns and their conversions
are still Django's (`get_db_prep_save`), and the clock's "now" is compiled once per group.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import connections, router
from django.db.models import Field, Value
from django.db.models.sql import InsertQuery

from notifications.models import DeliveryAttempt
from weave.leases import Clock, DbNow

_COLUMNS = (
    "notification",
    "owner",
    "fence",
    "started_at",
    "finished_at",
    "http_status",
    "latency_ms",
    "outcome",
    "reason",
    "number",
    "retry_at",
)


@dataclass(frozen=True)
class Receipt:
    """One attempt's receipt; `finished_at` is the database's now, `retry_at` now + `retry_in` seconds."""

    notification_id: Any
    owner: str
    fence: int
    started_at: datetime | None
    http_status: int | None
    latency_ms: int | None
    outcome: str
    reason: str
    number: int | None = None
    retry_in: float | None = None


def insert_receipts(receipts: list[Receipt], *, clock: Clock) -> None:
    """Insert `receipts` in one statement (several only past the database's parameter limit)."""
    if not receipts:
        return
    using = router.db_for_write(DeliveryAttempt)
    connection = connections[using]
    if connection.vendor == "postgresql" and _insert_arrays(receipts, connection, clock):
        return
    meta = DeliveryAttempt._meta
    fields = [cast("Field[Any, Any]", meta.get_field(name)) for name in _COLUMNS]
    query = InsertQuery(DeliveryAttempt)
    compiler = query.get_compiler(using)

    def compiled(offset: float) -> tuple[str, list[Any]]:
        expression = clock.now(timedelta(seconds=offset)).resolve_expression(query, allow_joins=False, for_save=True)
        sql, params = compiler.compile(expression)
        return sql, list(params)

    now_sql, now_params = compiled(0.0)
    qn = connection.ops.quote_name
    head = f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(f.column or f.name) for f in fields)}) VALUES "
    prep = {f.name: f for f in fields}
    per_row = len(fields) + len(now_params) * 2
    limit = connection.features.max_query_params or 65535
    chunk = max(1, limit // per_row)
    with connection.cursor() as cursor:
        for start in range(0, len(receipts), chunk):
            tuples = []
            params: list[Any] = []
            for r in receipts[start : start + chunk]:
                retry_params: list[Any] = []
                if r.retry_in is None:
                    retry_sql = "NULL"
                else:
                    retry_sql, retry_params = compiled(r.retry_in)
                tuples.append(f"(%s, %s, %s, %s, {now_sql}, %s, %s, %s, %s, %s, {retry_sql})")
                params += [
                    r.notification_id,
                    r.owner,
                    r.fence,
                    prep["started_at"].get_db_prep_save(r.started_at, connection),
                    *now_params,
                    r.http_status,
                    r.latency_ms,
                    r.outcome,
                    r.reason,
                    r.number,
                    *retry_params,
                ]
            cursor.execute(head + ", ".join(tuples), params)


def _insert_arrays(receipts: list[Receipt], connection: Any, clock: Clock) -> bool:
    """PostgreSQL: one INSERT ... SELECT FROM unnest(<one array per column>); its SQL text never changes.

    The database's clock gives `finished_at` (and `retry_at` = now + the row's delay) when the clock is
    the database's; a FakeClock's literal is computed here. Return False for any other clock.
    """
    now = clock.now()
    meta = DeliveryAttempt._meta
    fields = {name: cast("Field[Any, Any]", meta.get_field(name)) for name in _COLUMNS}
    qn = connection.ops.quote_name

    plain = ["notification", "owner", "fence", "started_at", "http_status", "latency_ms", "outcome", "reason", "number"]
    columns = {
        "notification": [r.notification_id for r in receipts],
        "owner": [r.owner for r in receipts],
        "fence": [r.fence for r in receipts],
        "started_at": [r.started_at for r in receipts],
        "http_status": [r.http_status for r in receipts],
        "latency_ms": [r.latency_ms for r in receipts],
        "outcome": [r.outcome for r in receipts],
        "reason": [r.reason for r in receipts],
        "number": [r.number for r in receipts],
    }
    params: list[Any] = [columns[name] for name in plain]
    sources = [f"%s::{fields[name].cast_db_type(connection)}[]" for name in plain]
    if isinstance(now, DbNow) and now.offset_seconds == 0:
        finished = "clock_timestamp()"
        sources.append("%s::double precision[]")
        params.append([r.retry_in for r in receipts])
        retry = "CASE WHEN v.retry_in IS NULL THEN NULL ELSE clock_timestamp() + make_interval(secs => v.retry_in) END"
    elif isinstance(now, Value) and isinstance(now.value, datetime):
        finished = "%s::timestamp with time zone"
        sources.append("%s::timestamp with time zone[]")
        params.append([None if r.retry_in is None else now.value + timedelta(seconds=r.retry_in) for r in receipts])
        retry = "v.retry_in"
    else:
        return False
    names = ", ".join([*plain, "retry_in"])
    select = ", ".join([*(f"v.{name}" for name in plain[:4]), finished, *(f"v.{name}" for name in plain[4:]), retry])
    target = ", ".join(qn(fields[name].column or name) for name in _COLUMNS)
    sql = f"INSERT INTO {qn(meta.db_table)} ({target}) SELECT {select} FROM unnest({', '.join(sources)}) AS v({names})"
    if isinstance(now, Value):
        params.insert(0, now.value)  # the FakeClock's literal sits in the SELECT list, before FROM's arrays
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return True
