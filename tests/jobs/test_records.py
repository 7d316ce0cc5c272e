"""A runner with an attempt table of its own settles through the core: `weave.jobs.AttemptRecords` (both databases).

The records here are a list, the smallest attempt table there is; the core's settlement decides what
is read back and what one ending is written, the runner only gives the job back its own way.
"""

import pytest
from django.db import OperationalError

from tests.jobs.invoices.models import Invoice
from weave.jobs import AttemptRecords, claim, record_blocked, settle_cut_off
from weave.leases import FakeClock, LeaseLost

pytestmark = pytest.mark.django_db(transaction=True)
CUT = OperationalError("server closed the connection unexpectedly\n\tThis probably means the server terminated")


class ListRecords:
    """One attempt's records kept in a list: (owner, fence, outcome, reason) rows."""

    def __init__(self, rows: list[tuple[str, int, str, str]], owner: str, fence: int, saved: bool = False) -> None:
        self.rows, self.owner, self.fence, self.saved = rows, owner, fence, saved

    def end(self, outcome: str, reason: str) -> None:
        self.rows.append((self.owner, self.fence, outcome, reason))

    def ended(self) -> str | None:
        return next((row[2] for row in self.rows if row[1] == self.fence), None)

    def landed(self, where: str) -> str:
        return "its save had landed" if self.saved else "nothing of its save landed"

    def owner_at(self, fence: int) -> str | None:
        return next((row[0] for row in self.rows if row[1] == fence), None)


def _give_back(ctx, given: list[str]):
    def give_back(reason: str) -> tuple[str, str]:
        ctx.release(state="pending", last_error=reason)
        given.append(reason)
        return "released", "Handed it back."

    return give_back


def test_a_lease_still_ours__the_job_is_given_back_with_one_ending_saying_where_and_what_landed():
    invoice = Invoice.objects.create(number="N1", email="a@example.com")
    ctx = claim("invoice", Invoice.objects.all(), invoice.pk, owner="worker-a", ttl=30)
    rows: list[tuple[str, int, str, str]] = []
    records: AttemptRecords = ListRecords(rows, "worker-a", ctx.lease.fence, saved=True)
    given: list[str] = []

    assert settle_cut_off(ctx, records, CUT, "at step mail", _give_back(ctx, given)) == "released"

    reason = "Cut off from the database at step mail (server closed the connection unexpectedly); its save had landed."
    assert given == [reason]
    assert rows == [("worker-a", ctx.lease.fence, "released", f"{reason} Handed it back.")]
    invoice.refresh_from_db()
    assert (invoice.owner, invoice.state, invoice.last_error) == (None, "pending", reason)


def test_an_ending_already_on_record__nothing_more_is_written_and_the_job_is_not_touched():
    invoice = Invoice.objects.create(number="N2", email="b@example.com")
    ctx = claim("invoice", Invoice.objects.all(), invoice.pk, owner="worker-a", ttl=30)
    rows = [("worker-a", ctx.lease.fence, "done", "Finished; only the COMMIT's reply was lost.")]
    given: list[str] = []

    assert (
        settle_cut_off(
            ctx, ListRecords(rows, "worker-a", ctx.lease.fence), CUT, "at the finish", _give_back(ctx, given)
        )
        is None
    )

    assert given == [] and len(rows) == 1
    invoice.refresh_from_db()
    assert invoice.owner == "worker-a"  # nothing was released under a lease whose ending is already on record


@pytest.mark.parametrize("taker_still_holds", [True, False])
def test_a_lease_taken_over_meanwhile__only_a_blocked_ending_naming_the_taker(taker_still_holds):
    invoice = Invoice.objects.create(number="N3", email="c@example.com")
    clock = FakeClock()
    ctx = claim("invoice", Invoice.objects.all(), invoice.pk, owner="worker-a", ttl=5, clock=clock)
    clock.advance(6)
    taker = claim("invoice", Invoice.objects.all(), invoice.pk, owner="worker-b", ttl=30, clock=clock)
    rows: list[tuple[str, int, str, str]] = []
    if not taker_still_holds:  # the taker finished meanwhile: the row names no one, its records do
        ListRecords(rows, "worker-b", taker.lease.fence).end("done", "Done.")
        taker.release(state="done")
    given: list[str] = []

    records = ListRecords(rows, "worker-a", ctx.lease.fence)
    assert settle_cut_off(ctx, records, CUT, "at step mail", _give_back(ctx, given)) == "blocked"

    assert given == []
    assert rows[-1] == (
        "worker-a",
        ctx.lease.fence,
        "blocked",
        "Cut off from the database at step mail (server closed the connection unexpectedly); nothing of its save "
        f"landed. Taken over meanwhile by worker-b at fence {taker.lease.fence}.",
    )
    invoice.refresh_from_db()
    assert invoice.fence == taker.lease.fence and invoice.last_error == ""


def test_a_lost_lease__recorded_once_as_blocked_and_never_over_an_ending_already_there():
    invoice = Invoice.objects.create(number="N4", email="d@example.com")
    ctx = claim("invoice", Invoice.objects.all(), invoice.pk, owner="worker-a", ttl=30)
    rows: list[tuple[str, int, str, str]] = []
    records = ListRecords(rows, "worker-a", ctx.lease.fence)
    lost = LeaseLost("the lease is no longer ours")

    record_blocked(ctx, records, lost, "at step mail")
    record_blocked(ctx, records, lost, "at the finish")

    assert rows == [("worker-a", ctx.lease.fence, "blocked", "Lease lost at step mail: the lease is no longer ours")]
