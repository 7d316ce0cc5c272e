"""PostgreSQL: concurrent batch claimers never share a row and together take every row once."""

import threading

import pytest
from django.db import connections

from tests.leasetest.models import Job
from weave.leases import DatabaseClock

ROWS = 300


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_claim_batch__two_threads_never_share_a_row():
    Job.objects.bulk_create(Job() for _ in range(ROWS))
    clock = DatabaseClock()
    claimed: dict[str, list[int]] = {"a": [], "b": []}
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            start.wait()
            while True:
                batch = Job.objects.order_by("pk").claim_batch(owner=name, ttl=60, limit=7, clock=clock)
                if not batch.fences:
                    return
                claimed[name].extend(batch.fences)
        except BaseException as exc:  # surfaced to the test below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(n,)) for n in claimed]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    a, b = set(claimed["a"]), set(claimed["b"])
    assert len(claimed["a"]) == len(a) and len(claimed["b"]) == len(b)
    assert not a & b
    assert a | b == set(Job.objects.values_list("pk", flat=True))
    assert a and b, "both claimers should have won some rows"
    assert set(Job.objects.values_list("fence", flat=True)) == {1}
