"""The lease core: the only place that knows the lease protocol (DESIGN §2).

Import the public names from here, never from the modules below it:

    from weave.leases import LeasedModel, LeaseQuerySet, Heartbeat, LeaseLost, LeaseBusy, ...

Besides the protocol itself, it offers the pieces for a hand-written statement that must stay as fast
as the core's own: `statement_cursor` (a cursor that keeps its statement prepared on the server),
`preparer` (a field's value conversion, made once per field) and `postgres_now_plus` (the database
clock plus a parameter's seconds, as SQL text).
"""

from weave.leases.binding import statement_cursor
from weave.leases.clock import Clock, DatabaseClock, DbNow, FakeClock, default_clock, postgres_now_plus
from weave.leases.errors import LeaseBusy, LeaseError, LeaseFieldsProtected, LeaseLapsed, LeaseLost, NotClaimable
from weave.leases.heartbeat import Heartbeat
from weave.leases.lease import BatchLease, Lease, new_owner
from weave.leases.models import LEASE_FIELDS, LeasedModel
from weave.leases.prepare import Preparer, preparer
from weave.leases.queryset import LeaseQuerySet
from weave.leases.receipts import insert_receipts
from weave.leases.returning import ClaimStatement

__all__ = [
    "BatchLease",
    "ClaimStatement",
    "Clock",
    "DatabaseClock",
    "DbNow",
    "FakeClock",
    "Heartbeat",
    "Lease",
    "LeaseBusy",
    "LeaseError",
    "LeaseFieldsProtected",
    "LeaseLapsed",
    "LeaseLost",
    "LeaseQuerySet",
    "LEASE_FIELDS",
    "LeasedModel",
    "NotClaimable",
    "Preparer",
    "default_clock",
    "insert_receipts",
    "new_owner",
    "postgres_now_plus",
    "preparer",
    "statement_cursor",
]
