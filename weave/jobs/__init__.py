"""Job types: one declaration per kind of leased job, and the coalesced-request beats every task shares.

from weave.jobs import JobType, register
"""

from weave.jobs.declaration import JobType, job_types, register, ttl_settings
from weave.jobs.queue import request, request_name, settled, started

__all__ = ["JobType", "job_types", "register", "request", "request_name", "settled", "started", "ttl_settings"]
