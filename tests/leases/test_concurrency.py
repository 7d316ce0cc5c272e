"""PostgreSQL: concurrent batch claimers never share a row and together take every row once."""

import pytest

from tests.leasetest.models import Job
from tests.threads import run_threads
from weave.leases import DatabaseClock

ROWS = 300


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_claim_batch__two_threads_never_share_a_row():
    Job.objects.bulk_create(Job() for _ in range(ROWS))
    clock = DatabaseClock()
    claimed: dict[str, list[int]] = {"a": [], "b": []}

    def worker(name: str) -> None:
        while True:
            batch = Job.objects.order_by("pk").claim_batch(owner=name, ttl=60, limit=7, clock=clock)
            if not batch.fences:
                return
            claimed[name].extend(batch.fences)

    run_threads(worker, list(claimed))
    a, b = set(claimed["a"]), set(claimed["b"])
    assert len(claimed["a"]) == len(a) and len(claimed["b"]) == len(b)
    assert not a & b
    assert a | b == set(Job.objects.values_list("pk", flat=True))
    assert a and b, "both claimers should have won some rows"
    assert set(Job.objects.values_list("fence", flat=True)) == {1}
