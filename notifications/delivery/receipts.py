"""Write a group's attempt receipts with ONE multi-row INSERT, built without model instances.

`bulk_create` builds a model instance per row and compiles every value through the ORM; for a group
of receipts that cost more CPU than the statement took to run. The columns and their conversions
are still Django's (`get_db_prep_save`), and the clock's "now" is compiled once per group.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import connections, router
from django.db.models import Field
from django.db.models.sql import InsertQuery

from notifications.models import DeliveryAttempt
from weave.leases import Clock

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
