"""Cancel and undo of a core-run job type: the saved steps' `undo`, newest first, each under the guard.

The shipment type is given a plan of three steps for these tests: `hold` (undo: release the hold),
`book` (saves a Booking; undo: deletes it) and `notify` (no undo). A step's undo runs only in an
attempt that claimed the cancelled job; a worker that loses its lease writes nothing more.
"""

import time
from dataclasses import replace

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.urls import reverse

from tests.jobs.shipping.models import Booking, Shipment
from weave.jobs import Fail, Step, declaration
from weave.jobs.explain import explain_job
from weave.jobs.runner import run_job
from weave.jobs.services import job_cancel
from weave.models import JobAttempt, JobStepReceipt

pytestmark = pytest.mark.django_db
TTL = 30  # SHIPPING_LEASE_TTL falls back to LEASE_TTL (tests.settings)

calls: list[str] = []  # what the steps and undos did, in order
hooks: dict[str, list] = {"book": [], "notify": [], "undo_book": []}


def hold(ctx):
    calls.append("hold")
    return {"hold": f"H-{ctx.lease.pk}"}


def release_hold(ctx, result):
    calls.append(f"undo hold {result['hold']}")


def book(ctx):
    calls.append("book")
    for hook in list(hooks["book"]):
        hook(ctx)
    return {"carrier_ref": f"CR-{ctx.lease.pk}"}


def record_booking(ctx, result):
    Booking.objects.create(shipment_id=ctx.lease.pk, carrier_ref=result["carrier_ref"], written_by=ctx.lease.owner)


def cancel_booking(ctx, result):
    Booking.objects.filter(shipment_id=ctx.lease.pk, carrier_ref=result["carrier_ref"]).delete()
    calls.append(f"undo book {result['carrier_ref']}")
    for hook in list(hooks["undo_book"]):
        hook(ctx)


def notify(ctx):
    calls.append("notify")
    for hook in list(hooks["notify"]):
        hook(ctx)


PLAN = (
    Step("hold", hold, undo=release_hold),
    Step("book", book, save=record_booking, undo=cancel_booking),
    Step("notify", notify),
)


@pytest.fixture(autouse=True)
def undoable_shipments():
    """The registered shipment type with the three-step plan above, restored afterwards."""
    declared = declaration.get("shipment")
    declaration._registry["shipment"] = replace(declared, steps=PLAN)
    calls.clear()
    for hooked in hooks.values():
        hooked.clear()
    yield
    declaration._registry["shipment"] = declared
    for hooked in hooks.values():
        hooked.clear()


def unreachable(ctx):
    raise ConnectionError("mail server unreachable")


def saved_two_steps(clock):
    """A shipment whose `hold` and `book` landed and whose `notify` failed for now (pending, a retry due)."""
    shipment = Shipment.objects.create(parcel="books")
    hooks["notify"].append(unreachable)
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "retry"
    hooks["notify"].clear()
    assert receipts(shipment) == [("hold", None, None), ("book", None, None)]
    calls.clear()
    return shipment


def receipts(shipment):
    rows = JobStepReceipt.objects.filter(job_type="shipment", job_id=str(shipment.pk)).order_by("pk")
    return [(r.step, r.undone_fence, r.undone_at is not None or None) for r in rows]


def test_cancel_and_undo__the_next_attempt_undoes_the_saved_steps_newest_first_and_explain_tells_it(clock):
    shipment = saved_two_steps(clock)
    assert Booking.objects.filter(shipment=shipment).count() == 1

    report = job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)
    assert report.changed == [shipment.pk]
    assert Shipment.objects.get(pk=shipment.pk).state == "undoing"

    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"

    assert calls == [f"undo book CR-{shipment.pk}", f"undo hold H-{shipment.pk}"]  # newest first; no step ran
    assert Booking.objects.filter(shipment=shipment).count() == 0
    # The undoing claim's fence (2) marks both receipts; they are kept, not deleted.
    assert receipts(shipment) == [("hold", 2, True), ("book", 2, True)]
    row = Shipment.objects.get(pk=shipment.pk)
    assert (row.state, row.owner, row.fence, row.finished_at is not None) == ("cancelled", None, 2, True)
    attempt = JobAttempt.objects.get(job_id=str(shipment.pk), fence=2)
    assert attempt.outcome == "done" and attempt.reason == "Cancelled and undone: book, hold."
    assert attempt.result == {"undo": {"undone": ["book", "hold"], "left": [], "failed": ""}}

    story = explain_job("shipment", Shipment, shipment.pk, clock=clock)
    text = story.as_text()
    assert [e.what for e in story.ordered()].count("undone") == 2
    assert "step book (saved by fence 1) undone by fence 2" in text
    assert "step hold (saved by fence 1) undone by fence 2" in text
    assert "Cancelled and undone: book, hold." in story.summary
    assert "Steps undone: book at " in story.summary and "by fence 2" in story.summary
    assert story.summary.endswith("saved and not undone: none.")


def test_cancel_and_undo__a_saved_step_without_undo_is_left_in_place_and_said(clock):
    done = Shipment.objects.create(parcel="books")
    assert run_job("shipment", done.pk, owner="w1", clock=clock) == "done"
    assert job_cancel(job_type="shipment", pks=[done.pk], undo=True, clock=clock).skipped == [done.pk]

    other = Shipment.objects.create(parcel="more books")
    assert run_job("shipment", other.pk, owner="w1", clock=clock) == "done"
    Shipment.objects.filter(pk=other.pk).update(state="failed")  # its saved steps: hold, book, notify
    assert job_cancel(job_type="shipment", pks=[other.pk], undo=True, clock=clock).changed == [other.pk]
    assert run_job("shipment", other.pk, owner="w2", clock=clock) == "done"
    attempt = JobAttempt.objects.filter(job_id=str(other.pk)).latest("number")
    assert attempt.reason == "Cancelled and undone: book, hold. Left in place (no undo): notify."
    assert receipts(other) == [("hold", 2, True), ("book", 2, True), ("notify", None, None)]
    assert "saved and not undone: notify." in explain_job("shipment", Shipment, other.pk, clock=clock).summary


def test_cancel_and_undo__a_running_attempts_next_save_is_refused_and_it_gives_the_job_back(clock):
    shipment = Shipment.objects.create(parcel="books")
    seen = {}

    def cancelled_meanwhile(ctx):
        hooks["book"].clear()
        seen["ctx"] = ctx
        assert job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock).changed == [shipment.pk]

    hooks["book"].append(cancelled_meanwhile)
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "cancelled"

    # The save of `book` was refused: no Booking, no receipt; only `hold` had landed.
    assert Booking.objects.count() == 0
    assert receipts(shipment) == [("hold", None, None)]
    row = Shipment.objects.values("state", "owner", "fence").get(pk=shipment.pk)
    assert row == {"state": "undoing", "owner": None, "fence": 1}  # given back at once for the undo
    attempt = JobAttempt.objects.get(job_id=str(shipment.pk), fence=1)
    assert attempt.outcome == "cancelled" and "stopped at step book without saving" in attempt.reason

    # The stale worker tries its save once more: the guard matches no row (it raises), nothing of it lands.
    from weave.leases import LeaseLost

    ctx = seen["ctx"]
    with pytest.raises(LeaseLost):
        with ctx.guarded():
            record_booking(ctx, {"carrier_ref": "late"})
    assert Booking.objects.count() == 0
    assert Shipment.objects.filter(pk=shipment.pk, owner="w1").count() == 0

    calls.clear()
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    assert calls == [f"undo hold H-{shipment.pk}"]
    assert receipts(shipment) == [("hold", 2, True)]
    assert Shipment.objects.get(pk=shipment.pk).state == "cancelled"


def test_cancel_and_undo__a_late_save_of_a_stalled_worker_after_the_cancel_is_refused(clock):
    shipment = Shipment.objects.create(parcel="books")

    def stall_then_cancelled_and_undone(ctx):
        hooks["book"].clear()
        clock.advance(TTL + 1)  # the worker stalls past its lease
        job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)
        assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"  # the undo ran meanwhile

    hooks["book"].append(stall_then_cancelled_and_undone)
    assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"

    assert Booking.objects.count() == 0  # the stale save never landed
    assert receipts(shipment) == [("hold", 2, True)]
    row = Shipment.objects.values("state", "owner", "fence", "last_error").get(pk=shipment.pk)
    assert row == {"state": "cancelled", "owner": None, "fence": 2, "last_error": ""}
    stale = JobAttempt.objects.get(job_id=str(shipment.pk), owner="stale")
    assert stale.outcome == "blocked" and "fence 2" in stale.reason


def carrier_down(ctx):
    raise ConnectionError("carrier unreachable")


def test_cancel_and_undo__an_undo_that_fails_for_now_is_retried_by_the_jobs_retry_policy(clock):
    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)

    hooks["undo_book"].append(carrier_down)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "retry"

    # The failed undo rolled back with its transaction: the Booking is still there, its receipt not undone.
    assert Booking.objects.filter(shipment=shipment).count() == 1
    assert receipts(shipment) == [("hold", None, None), ("book", None, None)]
    row = Shipment.objects.get(pk=shipment.pk)
    assert row.state == "undoing" and row.next_attempt_at is not None and row.owner is None
    assert "Undo of step book failed: ConnectionError: carrier unreachable." in row.last_error
    assert run_job("shipment", shipment.pk, owner="w3", clock=clock) == "not due"  # waits for its backoff

    hooks["undo_book"].clear()
    clock.advance(11)  # beyond the shipment type's backoff cap (10 s)
    assert run_job("shipment", shipment.pk, owner="w3", clock=clock) == "done"
    assert receipts(shipment) == [("hold", 3, True), ("book", 3, True)]
    assert Booking.objects.filter(shipment=shipment).count() == 0
    assert Shipment.objects.get(pk=shipment.pk).state == "cancelled"


def test_cancel_and_undo__an_undo_that_fails_for_good_fails_the_job_and_can_be_asked_again(clock):
    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)

    def refused(ctx):
        raise Fail("the carrier keeps the booking")

    hooks["undo_book"].append(refused)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "failed"
    assert Shipment.objects.get(pk=shipment.pk).state == "failed"
    assert receipts(shipment) == [("hold", None, None), ("book", None, None)]

    hooks["undo_book"].clear()
    assert job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock).changed == [shipment.pk]
    assert run_job("shipment", shipment.pk, owner="w3", clock=clock) == "done"
    assert receipts(shipment) == [("hold", 3, True), ("book", 3, True)]


def test_cancel_and_undo__an_undo_that_used_up_its_tries_says_so_in_its_reason(clock):
    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)

    hooks["undo_book"].append(carrier_down)
    outcomes = []
    for owner in ("w2", "w3", "w4"):
        outcomes.append(run_job("shipment", shipment.pk, owner=owner, clock=clock))
        clock.advance(11)
    assert outcomes == ["retry", "retry", "failed"]
    row = Shipment.objects.get(pk=shipment.pk)
    assert row.state == "failed" and row.last_error.startswith("Undo of step book failed: ConnectionError")
    assert row.last_error.endswith(" Not retried: that was undo try 3 and the retry policy allows 3.")


def undo_taken_over_at_book(clock):
    """A cancelled shipment whose undo attempt (w2, fence 2) stalls in book's undo and is taken over by a
    rival (fence 3): the attempt ends blocked. Return the shipment."""
    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)

    def stall_and_taken_over(ctx):
        hooks["undo_book"].clear()
        clock.advance(TTL + 1)
        Shipment.objects.claim(shipment.pk, owner="rival", ttl=TTL, clock=clock)

    hooks["undo_book"].append(stall_and_taken_over)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "blocked"
    return shipment


def test_cancel_and_undo__a_lease_lost_mid_undo_ends_blocked_naming_the_holder_and_writes_nothing_more(clock):
    shipment = undo_taken_over_at_book(clock)

    # book's undo had landed under fence 2; hold's was refused: not run, not marked.
    assert calls == [f"undo book CR-{shipment.pk}"]
    assert receipts(shipment) == [("hold", None, None), ("book", 2, True)]
    row = Shipment.objects.values("state", "owner", "fence", "last_error").get(pk=shipment.pk)
    assert row == {"state": "undoing", "owner": "rival", "fence": 3, "last_error": row["last_error"]}
    assert "Undo" not in row["last_error"]
    attempt = JobAttempt.objects.get(job_id=str(shipment.pk), fence=2)
    assert attempt.outcome == "blocked" and "rival at fence 3" in attempt.reason and "step hold" in attempt.reason


def test_cancel_and_undo__the_job_types_drain_runs_the_undo_too(clock):
    from weave.jobs.tasks import drain

    shipment = saved_two_steps(clock)
    waiting = Shipment.objects.create(parcel="waiting")  # a pending job of the same type, run after the undo
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)
    assert list(Shipment.objects.due(clock)) == [waiting]  # the pending drain's queryset never holds an undo
    assert list(Shipment.objects.undo_due(clock)) == [shipment]

    assert drain("shipment", budget=5) == {"done": 2}
    assert receipts(shipment) == [("hold", 2, True), ("book", 2, True)]
    assert Shipment.objects.get(pk=shipment.pk).state == "cancelled"
    assert Shipment.objects.get(pk=waiting.pk).state == "done"


def act(client, action, *pks):
    url = reverse("admin:shipping_shipment_changelist")
    return client.post(url, {"action": action, "_selected_action": [str(pk) for pk in pks]}, follow=True)


def test_admin__cancel_and_undo_asks_for_the_undo_and_writes_the_jobs_history(admin_client, clock):
    shipment = saved_two_steps(clock)
    response = act(admin_client, "cancel_and_undo_jobs", shipment.pk)
    said = [str(m) for m in response.context["messages"]]
    assert "Cancelled, undo of the saved steps asked: 1 job." in said
    assert Shipment.objects.get(pk=shipment.pk).state == "undoing"
    entry = LogEntry.objects.get(object_id=str(shipment.pk))
    assert entry.get_change_message() == "Cancelled, undo of the saved steps asked in the admin."

    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    page = admin_client.get(reverse("admin:shipping_shipment_change", args=[shipment.pk])).content.decode()
    # The job's timeline: who asked, then each step undone, by which fence.
    assert "step book (saved by fence 1) undone by fence 2" in page
    assert "step hold (saved by fence 1) undone by fence 2" in page
    assert "Cancelled and undone: book, hold." in page


def test_admin__a_view_only_user_cannot_cancel_and_undo(client, clock):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_shipment"))
    client.force_login(user)
    shipment = saved_two_steps(clock)
    url = reverse("admin:shipping_shipment_changelist")
    assert "Cancel and undo" not in client.get(url).content.decode()

    response = act(client, "cancel_and_undo_jobs", shipment.pk)
    said = [str(m) for m in response.context["messages"]]
    assert any("needs change permission" in m for m in said)
    assert Shipment.objects.get(pk=shipment.pk).state == "pending"
    assert not LogEntry.objects.filter(object_id=str(shipment.pk)).exists()


def test_cancel_and_undo__a_finish_waiting_in_a_batch_is_refused_and_the_job_handed_on(clock):
    """A batch writes its finishes later, together: each still expects its job pending when it lands."""
    from weave.jobs.batch import run_batches

    first = Shipment.objects.create(parcel="first")
    second = Shipment.objects.create(parcel="second")

    def cancel_the_first(ctx):
        if ctx.lease.pk == second.pk:  # the first's steps are saved, its finish waits to be written
            assert job_cancel(job_type="shipment", pks=[first.pk], undo=True, clock=clock).changed == [first.pk]

    hooks["notify"].append(cancel_the_first)
    due = Shipment.objects.due(clock).order_by("pk")
    report = run_batches("shipment", due, budget=5, owner="w1", clock=clock, flush_rows=100, flush_seconds=600)
    assert report.outcomes == {"done": 1, "cancelled": 1}

    row = Shipment.objects.values("state", "owner", "fence", "finished_at").get(pk=first.pk)
    assert row == {"state": "undoing", "owner": None, "fence": 1, "finished_at": None}  # not "done"
    attempt = JobAttempt.objects.get(job_id=str(first.pk))
    assert attempt.outcome == "cancelled" and "stopped at the finish without saving" in attempt.reason
    assert Shipment.objects.get(pk=second.pk).state == "done"

    hooks["notify"].clear()
    calls.clear()
    assert run_job("shipment", first.pk, owner="w2", clock=clock) == "done"
    assert calls == [f"undo book CR-{first.pk}", f"undo hold H-{first.pk}"]
    assert receipts(first) == [("hold", 2, True), ("book", 2, True), ("notify", None, None)]
    assert Shipment.objects.get(pk=first.pk).state == "cancelled"


def test_cancel_and_undo__a_job_type_without_any_undo_is_refused_and_has_no_such_action(admin_client):
    from tests.jobs.invoices.models import Invoice

    invoice = Invoice.objects.create(number="2026-100", email="buyer@example.com")
    with pytest.raises(ValueError, match="declares no step with an undo"):
        job_cancel(job_type="invoice", pks=[invoice.pk], undo=True)
    page = admin_client.get(reverse("admin:invoices_invoice_changelist")).content.decode()
    assert "Cancel and undo" not in page and "Cancel (pending" in page
    Shipment.objects.create(parcel="books")  # the list shows its actions once it has a row
    assert "Cancel and undo" in admin_client.get(reverse("admin:shipping_shipment_changelist")).content.decode()


def test_admin_list__the_undoing_state_is_offered_only_where_a_step_has_an_undo(admin_client):
    """An invoice or a task never reaches `undoing`, so its state filter does not offer it; a shipment can."""
    assert "state__exact=undoing" in admin_client.get(reverse("admin:shipping_shipment_changelist")).content.decode()
    for url in (reverse("admin:invoices_invoice_changelist"), "/admin/weave/taskrow/"):
        page = admin_client.get(url).content.decode()
        assert "state__exact=pending" in page and "state__exact=undoing" not in page, url


@pytest.mark.django_db(transaction=True)
def test_cancel_and_undo__an_undo_cut_off_from_the_database_gives_the_job_back_still_undoing(clock):
    from django.db import OperationalError

    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)

    def link_down(ctx):
        hooks["undo_book"].clear()
        raise OperationalError("server closed the connection unexpectedly")

    hooks["undo_book"].append(link_down)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "retry"

    attempt = JobAttempt.objects.get(job_id=str(shipment.pk), fence=2)
    assert "at step book" in attempt.reason and "nothing of step book's undo landed" in attempt.reason
    row = Shipment.objects.values("state", "owner", "next_attempt_at").get(pk=shipment.pk)
    assert row == {"state": "undoing", "owner": None, "next_attempt_at": None}
    assert receipts(shipment) == [("hold", None, None), ("book", None, None)]
    assert Booking.objects.filter(shipment=shipment).count() == 1  # the undo's delete rolled back with it

    assert run_job("shipment", shipment.pk, owner="w3", clock=clock) == "done"
    assert receipts(shipment) == [("hold", 3, True), ("book", 3, True)]


def test_cancel_and_undo__the_dashboard_console_and_metrics_count_the_undoing_state(admin_client, clock):
    from weave.jobs.console import counted_states

    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)
    Shipment.objects.create(parcel="waiting")

    counts, _ = counted_states(declaration.get("shipment"))
    assert counts == {"pending": 1, "done": 0, "failed": 0, "cancelled": 0, "undoing": 1}
    page = admin_client.get("/admin/weave/dashboard/").content.decode()
    assert "undoing" in page
    metrics = admin_client.get("/metrics").content.decode()
    assert 'weave_jobs{job="shipment",state="undoing"} 1.0' in metrics
    listing = admin_client.get(reverse("admin:shipping_shipment_changelist") + "?state=undoing").content.decode()
    assert "undo due now" in listing


# --- an undo with an outside call: `undo_run` outside any transaction, then `undo`'s writes -------------

seen: list[tuple] = []  # (what ran, how many atomic blocks were open, what it was given)


def cancel_at_carrier(ctx, result):
    seen.append(("undo_run", len(connection.atomic_blocks), result["carrier_ref"], f"{ctx.idempotency_key}:undo"))
    for hook in list(hooks["undo_book"]):
        hook(ctx)
    return {"refund": f"RF-{result['carrier_ref']}"}


def delete_refunded_booking(ctx, value):
    seen.append(("undo", len(connection.atomic_blocks), value["refund"], ""))
    Booking.objects.filter(shipment_id=ctx.lease.pk, carrier_ref=ctx.results["book"]["carrier_ref"]).delete()


def release_hold_at_carrier(ctx, result):
    seen.append(("undo_run", len(connection.atomic_blocks), result["hold"], ""))


CALLING_PLAN = (
    Step("hold", hold, undo_run=release_hold_at_carrier),  # an outside call and no writes
    Step("book", book, save=record_booking, undo=delete_refunded_booking, undo_run=cancel_at_carrier),
    Step("notify", notify),
)


@pytest.fixture
def calling_undos():
    declared = declaration.get("shipment")
    declaration._registry["shipment"] = replace(declared, steps=CALLING_PLAN)
    seen.clear()
    yield
    declaration._registry["shipment"] = replace(declared, steps=PLAN)


def test_undo_run__makes_the_outside_call_outside_any_transaction_and_undo_writes_with_its_answer(calling_undos, clock):
    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)
    depth = len(connection.atomic_blocks)  # the test's own, if any

    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"

    ref = f"CR-{shipment.pk}"
    assert seen == [
        ("undo_run", depth, ref, f"shipment:{shipment.pk}:0:book:undo"),  # no transaction of the runner's open
        ("undo", depth + 1, f"RF-{ref}", ""),  # inside the guarded one, given what undo_run returned
        ("undo_run", depth, f"H-{shipment.pk}", ""),
    ]
    assert Booking.objects.filter(shipment=shipment).count() == 0
    # A step with only an outside undo is undone too: its receipt is marked in a guarded transaction.
    assert receipts(shipment) == [("hold", 2, True), ("book", 2, True)]
    attempt = JobAttempt.objects.get(job_id=str(shipment.pk), fence=2)
    assert attempt.outcome == "done" and attempt.reason == "Cancelled and undone: book, hold."


def test_undo_run__a_lease_lost_during_the_outside_call_writes_nothing_and_names_the_holder(calling_undos, clock):
    shipment = undo_taken_over_at_book(clock)

    # The call was made (the rival's undo repeats it under the same key); its writes never ran.
    assert [what for what, *_ in seen] == ["undo_run"]
    assert Booking.objects.filter(shipment=shipment).count() == 1
    assert receipts(shipment) == [("hold", None, None), ("book", None, None)]
    row = Shipment.objects.values("state", "owner", "fence").get(pk=shipment.pk)
    assert row == {"state": "undoing", "owner": "rival", "fence": 3}
    attempt = JobAttempt.objects.get(job_id=str(shipment.pk), fence=2)
    assert attempt.outcome == "blocked" and "rival at fence 3" in attempt.reason and "step book" in attempt.reason


def test_undo_run__an_outside_call_that_fails_for_now_is_retried_and_writes_nothing(calling_undos, clock):
    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)

    hooks["undo_book"].append(carrier_down)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "retry"
    assert [what for what, *_ in seen] == ["undo_run"]
    assert Booking.objects.filter(shipment=shipment).count() == 1
    assert receipts(shipment) == [("hold", None, None), ("book", None, None)]
    row = Shipment.objects.get(pk=shipment.pk)
    assert row.state == "undoing"
    assert "Undo of step book failed: ConnectionError: carrier unreachable." in row.last_error

    hooks["undo_book"].clear()
    clock.advance(11)
    assert run_job("shipment", shipment.pk, owner="w3", clock=clock) == "done"
    assert receipts(shipment) == [("hold", 3, True), ("book", 3, True)]


def test_undo_run__a_step_with_only_an_outside_undo_makes_its_type_undoable():
    declared = declaration.get("shipment")
    only_outside = replace(declared, steps=(Step("hold", hold, undo_run=release_hold_at_carrier),))
    none = replace(declared, steps=(Step("hold", hold),))
    assert (only_outside.undoable, none.undoable) == (True, False)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_undo_run__an_outside_call_longer_than_the_idle_in_transaction_limit_completes(calling_undos, clock):
    # A worker's sessions end when idle inside a transaction past WORKER_DB_IDLE_IN_TRANSACTION_TIMEOUT:
    # an outside call made inside the undo's transaction would be cut off at every attempt.
    shipment = saved_two_steps(clock)
    job_cancel(job_type="shipment", pks=[shipment.pk], undo=True, clock=clock)
    hooks["undo_book"].append(lambda ctx: time.sleep(0.6))
    with connection.cursor() as cursor:
        cursor.execute("SET idle_in_transaction_session_timeout = 200")
    try:
        assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
        assert receipts(shipment) == [("hold", 2, True), ("book", 2, True)]
        with connection.cursor() as cursor:  # the same session: never cut
            cursor.execute("SHOW idle_in_transaction_session_timeout")
            assert cursor.fetchone()[0] == "200ms"
    finally:
        connection.close()  # the next test's session starts without the limit
