"""The lease core: the only place that knows the lease protocol (DESIGN §2).

Import the public names from here:

    from weave.leases import LeasedModel, LeaseQuerySet, Heartbeat, LeaseLost, LeaseBusy, ...
"""

from weave.leases.clock import Clock, DatabaseClock, DbNow, FakeClock, default_clock
from weave.leases.errors import LeaseBusy, LeaseError, LeaseFieldsProtected, LeaseLapsed, LeaseLost, NotClaimable
from weave.leases.heartbeat import Heartbeat
from weave.leases.lease import BatchLease, Lease, new_owner
from weave.leases.models import LEASE_FIELDS, LeasedModel
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
    "default_clock",
    "insert_receipts",
    "new_owner",
]
