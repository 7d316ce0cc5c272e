"""Every core-run job type gets the operator surfaces from its declaration alone: the site's own shipment
type (tests/jobs/shipping, whose admin.py only mixes in `JobAdminMixin`) and the `django.tasks` "task" type."""

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db.models import F
from prometheus_client.parser import text_string_to_metric_families

from tests.jobs.shipping.carrier import during_booking
from tests.jobs.shipping.models import Shipment
from weave import metrics
from weave.jobs.runner import run_job
from weave.leases import FakeClock
from weave.models import JobAttempt, TaskRow
from weave.telemetry import db_now
from weave.timeline import stamp

ATTEMPT = {"attempts": F("attempts") + 1}  # a rival's claim counts its attempt, as the runner's does
pytestmark = pytest.mark.django_db
TTL = 30
DASHBOARD = "/admin/weave/dashboard/"


@pytest.fixture
def clock():
    # Near the database's now, so the dashboard's "last hour" holds what these tests run.
    return FakeClock(start=db_now())


@pytest.fixture(autouse=True)
def _fresh_counters():
    metrics._job_attempts.reset()


def blocked_shipment(clock) -> Shipment:
    """A shipment whose first worker stalled mid-booking and lost its lease to a rival, who holds it now."""
    shipment = Shipment.objects.create(parcel="books")

    def stall_and_claim(ctx, hb):
        during_booking.remove(stall_and_claim)
        hb.stop()
        clock.advance(TTL + 1)
        # The runner's own claim (it counts the attempt); the rival's attempt is still running.
        Shipment.objects.claim(shipment.pk, owner="rival", ttl=TTL, clock=clock, also=ATTEMPT)

    during_booking.append(stall_and_claim)
    assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"
    return shipment


# --- the dashboard -----------------------------------------------------------------------------------------


def test_dashboard__a_blocked_attempt_of_a_sites_job_is_in_the_verdict_and_its_panel(admin_client, clock):
    healthy = admin_client.get(DASHBOARD).content.decode()
    assert "<strong>Healthy.</strong>" in healthy
    assert 'id="weave-job-shipment"' in healthy, "a panel for the site's job type, before any job exists"

    shipment = blocked_shipment(clock)
    page = admin_client.get(DASHBOARD).content.decode()
    assert "<strong>Healthy.</strong>" not in page
    verdict = page[page.index('id="weave-verdict"') : page.index("</div>", page.index('id="weave-verdict"'))]
    assert "1 shipment attempt in the last hour lost its lease" in verdict
    assert f"/admin/shipping/shipment/{shipment.pk}/change/" in verdict and "now held by rival at fence 2" in verdict
    panel = page[page.index('id="weave-job-shipment"') :]
    assert "live leases" in panel and "blocked attempts (1 h)" in panel
    assert "stale" in panel, "the troubled attempt's holder is named"


def test_dashboard__the_troubled_attempts_column_names_their_own_worker_not_a_holder(admin_client, clock):
    """The job is held by its new owner now; the table's column is the worker that ran the blocked attempt."""
    blocked_shipment(clock)
    page = admin_client.get(DASHBOARD).content.decode()
    panel = page[page.index('id="weave-job-shipment"') :]
    header = panel[panel.index("<thead>") : panel.index("</thead>")]
    assert ">worker<" in header and "held by" not in header
    assert "stale" in panel[panel.index("</thead>") :]


def test_dashboard__several_blocked_attempts_are_said_in_the_plural(admin_client, clock):
    blocked_shipment(clock)
    blocked_shipment(clock)
    page = admin_client.get(DASHBOARD).content.decode()
    verdict = page[page.index('id="weave-verdict"') : page.index("</div>", page.index('id="weave-verdict"'))]
    assert "2 shipment attempts in the last hour lost their leases and wrote nothing after them (blocked)" in verdict


def test_dashboard__failed_and_retried_attempts_feed_the_verdict(admin_client, clock):
    failing = Shipment.objects.create(parcel="")  # the quote step refuses a shipment without a parcel
    assert run_job("shipment", failing.pk, owner="w1", clock=clock) == "failed"
    page = admin_client.get(DASHBOARD).content.decode()
    assert "1 shipment attempt in the last hour failed for good" in page and "no parcel to ship" in page


def test_dashboard__a_worker_killed_mid_job_is_in_the_verdict_once_the_takeover_ended(admin_client, clock):
    """A killed worker writes no record; the attempt that took its job over is the first trace of it. The
    verdict says so instead of "Healthy" (a task's takeover records a blocked attempt; a job's does not)."""
    shipment = Shipment.objects.create(parcel="books")
    Shipment.objects.claim(shipment.pk, owner="killed", ttl=TTL, clock=clock, also=ATTEMPT)
    clock.advance(TTL + 1)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    fine = Shipment.objects.create(parcel="maps")  # a job that ran once: no gap, no finding
    assert run_job("shipment", fine.pk, owner="w2", clock=clock) == "done"
    page = admin_client.get(DASHBOARD).content.decode()
    assert "<strong>Healthy.</strong>" not in page
    verdict = page[page.index('id="weave-verdict"') : page.index("</div>", page.index('id="weave-verdict"'))]
    assert "1 shipment job in the last hour had an attempt that never ended" in verdict
    assert f"/admin/shipping/shipment/{shipment.pk}/change/" in verdict
    assert "by w2 at fence 2" in re.sub(r"<[^>]+>", "", verdict)
    assert f"/admin/shipping/shipment/{fine.pk}/change/" not in verdict


def test_dashboard__the_task_type_has_its_panel(admin_client):
    page = admin_client.get(DASHBOARD).content.decode()
    assert 'id="weave-job-task"' in page


# --- Prometheus --------------------------------------------------------------------------------------------


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics__jobs_by_state_attempts_by_outcome_and_leases_per_job_type(admin_client, clock, monkeypatch):
    shipment = blocked_shipment(clock)
    Shipment.objects.create(parcel="waiting")
    # The attempts ended on the fake clock, which ran ahead of the database's: count up to an hour ahead.
    monkeypatch.setattr(metrics, "LAG", metrics.timedelta(seconds=-3600))
    seen = samples(admin_client.get("/metrics").content.decode())
    assert seen[("weave_jobs", (("job", "shipment"), ("state", "pending")))] == 2
    assert seen[("weave_jobs", (("job", "shipment"), ("state", "done")))] == 0
    assert seen[("weave_jobs", (("job", "task"), ("state", "pending")))] == 0
    assert seen[("weave_job_attempts_total", (("job", "shipment"), ("outcome", "blocked")))] == 1
    assert seen[("weave_job_attempts_total", (("job", "shipment"), ("outcome", "done")))] == 0
    assert seen[("weave_lease_refusals_total", (("job", "shipment"),))] == 1
    assert seen[("weave_leases", (("job", "shipment"), ("state", "live")))] == 1  # the rival's
    assert JobAttempt.objects.get(job_id=str(shipment.pk)).outcome == "blocked"


@pytest.mark.postgres
def test_jobs_by_state__finished_states_from_planner_statistics_pending_exact(admin_client, monkeypatch):
    from django.db import connection

    from weave.jobs import get
    from weave.jobs.console import counted_states

    Shipment.objects.bulk_create([Shipment(parcel="old", state="done") for _ in range(40)])
    Shipment.objects.bulk_create([Shipment(parcel="new") for _ in range(10)])
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Shipment._meta.db_table}")
    Shipment.objects.bulk_create([Shipment(parcel="newer") for _ in range(3)])  # after the statistics
    monkeypatch.setattr("weave.telemetry.EXACT_BELOW", 0)  # stand-in for a table of millions
    counts, estimated = counted_states(get("shipment"))
    assert estimated
    assert counts["pending"] == 13  # counted exactly, whatever the statistics say
    assert counts["done"] == 40  # the planner's estimate: exact here, as ANALYZE read every row
    assert "≈ 40" in admin_client.get(DASHBOARD).content.decode()
    monkeypatch.setattr("weave.telemetry.EXACT_BELOW", 10**9)
    counts = {"pending": 13, "done": 40, "failed": 0, "cancelled": 0, "undoing": 0}  # every state named
    assert counted_states(get("shipment")) == (counts, False)


def test_leases__a_held_row_is_counted_live_or_expired_by_its_expiry(clock):
    from weave.telemetry import lease_counts

    held, lapsed, free = (Shipment.objects.create(parcel=p) for p in ("held", "lapsed", "free"))
    Shipment.objects.claim(held.pk, owner="a", ttl=TTL, clock=clock)
    Shipment.objects.claim(lapsed.pk, owner="b", ttl=1, clock=clock)
    clock.advance(2)
    assert lease_counts(clock)["shipment"] == {"live": 1, "expired": 1}
    assert Shipment.objects.get(pk=free.pk).owner is None


# --- the admin -----------------------------------------------------------------------------------------------


def test_admin_list__state_attempts_lease_next_attempt_and_last_error(admin_client, clock):
    shipment = blocked_shipment(clock)
    page = admin_client.get("/admin/shipping/shipment/").content.decode()
    for column in ("job_state", "attempts", "lease", "next_attempt", "last_error_line"):
        assert f"column-{column}" in page, column
    assert re.search(r'field-lease">live · <span class="weave-clip-line" title="rival">rival</span> · fence 2', page)
    assert f'value="{shipment.pk}"' in page


def test_admin_list__tasks_have_an_admin_with_the_same_columns(admin_client):
    from tests.jobs.shipping.background import add

    result = add.enqueue(2, 3)
    page = admin_client.get("/admin/weave/taskrow/").content.decode()
    for column in ("task_name", "job_state", "attempts", "lease", "next_attempt", "last_error_line"):
        assert f"column-{column}" in page, column
    row = TaskRow.objects.get(result_id=str(result.id))
    story = admin_client.get(f"/admin/weave/taskrow/{row.pk}/change/").content.decode()
    assert story.index('id="weave-story"') < story.index("field-result_id") < story.index("field-fence")


def test_admin_change_page__the_story_comes_before_the_fields_which_are_read_only(admin_client, clock):
    shipment = blocked_shipment(clock)
    page = admin_client.get(f"/admin/shipping/shipment/{shipment.pk}/change/").content.decode()
    story = page.index('id="weave-story"')
    summary = page.index("2 attempts: 1 ended, 1 running; the newest attempt that ended, attempt 1, ended blocked")
    timeline = page.index('class="weave-timeline"')
    assert story < summary < timeline < page.index("field-parcel") < page.index("field-fence")
    assert 'name="fence"' not in page and 'name="owner"' not in page, "lease fields are never a form input"
    assert 'name="parcel"' in page, "the site's own field stays editable"


def view_only_staff(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_shipment"))
    client.login(username="viewer", password="pw")
    return user


def test_actions__a_view_only_user_is_not_offered_them_and_cannot_post_them(client):
    pending = Shipment.objects.create(parcel="a")
    view_only_staff(client)
    url = "/admin/shipping/shipment/"
    page = client.get(url).content.decode()
    assert page.count("cancel_jobs") == 0 and "start_jobs" not in page and "retry_jobs" not in page
    response = client.post(url, {"action": "cancel_jobs", "_selected_action": [str(pending.pk)]}, follow=True)
    assert response.status_code == 200
    assert Shipment.objects.get(pk=pending.pk).state == "pending", "nothing changed"


def test_actions__a_user_with_change_permission_may_and_the_story_shows_who(client):
    pending = Shipment.objects.create(parcel="a")
    user = view_only_staff(client)
    user.user_permissions.add(Permission.objects.get(codename="change_shipment"))
    url = "/admin/shipping/shipment/"
    client.post(url, {"action": "cancel_jobs", "_selected_action": [str(pending.pk)]}, follow=True)
    assert Shipment.objects.get(pk=pending.pk).state == "cancelled"
    page = client.get(f"/admin/shipping/shipment/{pending.pk}/change/").content.decode()
    assert "by viewer: Cancelled in the admin." in page


# --- weave_explain -----------------------------------------------------------------------------------------


def test_explain__a_sites_job_type_from_the_command(clock):
    shipment = blocked_shipment(clock)
    out = StringIO()
    call_command("weave_explain", "shipment", str(shipment.pk), stdout=out)
    text = out.getvalue()
    # The rival's attempt is running (counted by its claim, no history row yet): title and summary agree.
    assert text.startswith(f"shipment {shipment.pk}: pending, 2 attempts: 1 ended, 1 running")
    assert "2 attempts: 1 ended, 1 running; the newest attempt that ended, attempt 1, ended blocked" in text
    assert "rival holds it under fence 2 now." in text


def test_actions__the_shipped_topic_admin_refuses_a_view_only_user_too(client):
    from notifications.models import TopicSubscription

    rows = [
        TopicSubscription.objects.create(backend="fcm", topic=f"t{n}", action="subscribe", tokens=["x"]) for n in (1, 2)
    ]
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_topicsubscription"))
    client.login(username="viewer", password="pw")
    url = "/admin/weave_notifications/topicsubscription/"
    assert "cancel_jobs" not in client.get(url).content.decode()
    client.post(url, {"action": "cancel_jobs", "_selected_action": [str(r.pk) for r in rows]}, follow=True)
    assert list(TopicSubscription.objects.values_list("state", flat=True)) == ["pending", "pending"]
    page = client.get(f"{url}{rows[0].pk}/change/").content.decode()
    assert page.index('id="weave-story"') < page.index("field-topic") < page.index("field-fence")


def explain_text(kind: str, key: object) -> str:
    out = StringIO()
    call_command("weave_explain", kind, str(key), stdout=out)
    return out.getvalue()


def test_explain__the_summary_names_the_newest_attempt_even_when_an_older_one_ended_after_it(clock):
    """The stale worker's attempt 1 ends (blocked) after the rival's attempt 2 finished the job: the summary
    speaks of attempt 2, the one that decided the job's state, and says which it picked."""
    shipment = Shipment.objects.create(parcel="books")

    def stall_while_a_rival_finishes(ctx, hb):
        during_booking.remove(stall_while_a_rival_finishes)
        hb.stop()
        clock.advance(TTL + 1)
        assert run_job("shipment", shipment.pk, owner="rival", clock=clock) == "done"
        clock.advance(1)

    during_booking.append(stall_while_a_rival_finishes)
    assert run_job("shipment", shipment.pk, owner="stale", clock=clock) == "blocked"
    ended = dict(JobAttempt.objects.filter(job_id=str(shipment.pk)).values_list("number", "finished_at"))
    assert ended[1] > ended[2], "attempt 1 ended last"

    text = explain_text("shipment", shipment.pk)
    assert "2 attempts; the newest attempt that ended, attempt 2, ended done." in text
    assert "last one that ended" not in text, "attempt 2 is not the one that ended last"


def test_explain__the_retry_a_job_waits_on_says_when_its_next_try_is_due(clock, admin_client):
    """The retried attempt's line says when the next try is due: the row's due time, by the database clock,
    the same time the summary gives; once the next try has run, nothing waits on that retry any more, and its
    line still says when that try was due."""
    from weave.timeline import clock_time

    shipment = Shipment.objects.create(parcel="books")

    def refuse(ctx, hb):
        during_booking.remove(refuse)
        raise ConnectionError("the carrier is down")

    during_booking.append(refuse)
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "retry"
    due = clock_time(Shipment.objects.get(pk=shipment.pk).next_attempt_at)
    text = explain_text("shipment", shipment.pk)
    (line,) = [line for line in text.splitlines() if "retry" in line and "attempt 1 (fence 1)" in line]
    assert line.endswith(f"ConnectionError: the carrier is down (at step book). Next try due {due} (database time).")
    assert f"Next attempt due at {due}." in text, "the summary gives the same due time"
    page = admin_client.get(f"/admin/shipping/shipment/{shipment.pk}/change/").content.decode()
    assert f"Next try due {due} (database time)." in page, "the admin's story says it too"

    clock.advance(60)
    assert run_job("shipment", shipment.pk, owner="w2", clock=clock) == "done"
    # Nothing waits on it any more, and the summary gives no due time; the retry's line still says when its
    # next try was due, from its record.
    text = explain_text("shipment", shipment.pk)
    assert text.count("Next try due") == 1 and line in text
    assert "Next attempt due" not in text


def test_explain__a_deleted_job_is_told_from_its_records_and_said_to_be_gone(clock):
    shipment = Shipment.objects.create(parcel="books")
    assert run_job("shipment", shipment.pk, owner="w1", clock=clock) == "done"
    last = JobAttempt.objects.get(job_id=str(shipment.pk)).finished_at
    Shipment.objects.filter(pk=shipment.pk).delete()

    text = explain_text("shipment", shipment.pk)
    assert text.startswith(f"shipment {shipment.pk}: the job row is gone, 1 attempt record")
    assert "attempt 1 (fence 1)" in text and "step quote saved by fence 1 (w1)" in text
    assert "the newest attempt that ended, attempt 1, ended done" in text
    assert f"The job row is gone (deleted); its last attempt record is from {stamp(last)} (database time)" in text


def test_explain__a_deleted_task_is_told_from_its_records_by_its_number(clock):
    from tests.jobs.shipping.background import add
    from weave.tasks.results import JOB_TYPE

    result = add.enqueue(2, 3)
    row = TaskRow.objects.get(result_id=str(result.id))
    assert run_job(JOB_TYPE, row.pk, owner="w1", clock=clock) == "done"
    TaskRow.objects.filter(pk=row.pk).delete()

    text = explain_text("task", row.pk)
    assert text.startswith(f"task {row.pk}: the job row is gone, 1 attempt record")
    assert "The job row is gone (deleted)" in text


def test_explain__no_row_and_no_records_is_still_no_such_job():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No shipment with id 987654"):
        explain_text("shipment", 987654)


def test_admin_list_and_story__a_job_whose_lease_lapsed_is_due_not_running(admin_client):
    """Its worker was killed mid-job: the row still names it, but nothing runs it until the next claim."""
    shipment = Shipment.objects.create(parcel="books")
    Shipment.objects.claim(shipment.pk, owner="killed", ttl=-90, also=ATTEMPT)  # lapsed by the database clock
    page = admin_client.get("/admin/shipping/shipment/").content.decode()
    assert re.search(r'field-next_attempt">due now \(lease expired\)<', page), "not said to be running"
    out = StringIO()
    call_command("weave_explain", "shipment", str(shipment.pk), stdout=out)
    assert "killed at fence 1, lease expired at " in out.getvalue()


def test_story__a_notification_whose_lease_lapsed_says_when_it_expired():
    from notifications.explain import explain_notification
    from notifications.models import Notification

    note = Notification.objects.create(device_token="device-lapsed", title="t", body="b")
    Notification.objects.claim(note.pk, owner="push:killed:1:aa", ttl=-90)
    (line,) = [e.text for e in explain_notification(note.pk).entries if e.what == "holder"]
    assert line.startswith("push:killed:1:aa at fence 1, lease expired at "), line


def test_admin_change_page__the_jobs_times_have_seconds_and_zone_by_the_database_clock(admin_client, clock):
    from weave.display import timestamp

    shipment = blocked_shipment(clock)
    row = Shipment.objects.get(pk=shipment.pk)
    for url in (f"/admin/shipping/shipment/{row.pk}/change/", f"/admin/weave/taskrow/{task_row().pk}/change/"):
        page = admin_client.get(url).content.decode()
        assert "Created at (database clock)" in page and "Finished at (database clock)" in page, url
        assert "Lease expires at (database clock)" in page, url
        assert "field-created_at " not in page and "field-lease_expires_at " not in page, "each time shown once"
    page = admin_client.get(f"/admin/shipping/shipment/{row.pk}/change/").content.decode()
    assert timestamp(row.created_at) in page and timestamp(row.lease_expires_at) in page


def task_row() -> TaskRow:
    from tests.jobs.shipping.background import add

    return TaskRow.objects.get(result_id=str(add.enqueue(1, 2).id))


def _record(shipment: Shipment, number: int, outcome: str, at) -> None:
    """An ended attempt's record, as the runner writes it (by the database clock)."""
    JobAttempt.objects.create(
        job_type="shipment",
        job_id=str(shipment.pk),
        number=number,
        owner=f"w{number}",
        fence=number,
        outcome=outcome,
        reason="carrier busy",
        started_at=at,
        finished_at=at,
    )


def test_dashboard__the_verdict_counts_the_jobs_it_does_not_name_in_jobs(admin_client):
    """The verdict names jobs, so what it leaves unnamed is counted in jobs too, in a proper plural."""
    now = db_now()
    busy, quiet, other = (Shipment.objects.create(parcel=p) for p in ("books", "maps", "pens"))
    for n in range(1, 6):  # the five newest retried attempts are all of one job ...
        _record(busy, n, JobAttempt.Outcome.RETRY, now - timedelta(seconds=n))
    _record(quiet, 1, JobAttempt.Outcome.RETRY, now - timedelta(minutes=5))  # ... two other jobs, 3 older ones
    _record(quiet, 2, JobAttempt.Outcome.RETRY, now - timedelta(minutes=4))
    _record(other, 1, JobAttempt.Outcome.RETRY, now - timedelta(minutes=6))
    page = admin_client.get(DASHBOARD).content.decode()
    verdict = page[page.index('id="weave-verdict"') : page.index("</div>", page.index('id="weave-verdict"'))]
    said = re.sub(r"<[^>]+>", "", verdict)
    assert "8 shipment attempts in the last hour failed and will retry" in said
    assert f"(shipment #{busy.pk} and 2 more jobs)" in said
    assert "(s)" not in said


def test_dashboard__a_job_whose_workers_died_twice_is_one_job_in_the_verdict(admin_client):
    """Two attempts of one job that never ended make one job that had one, not two; one more is said singular."""
    now = db_now()
    twice = Shipment.objects.create(parcel="books")
    _record(twice, 2, JobAttempt.Outcome.RETRY, now - timedelta(seconds=30))  # attempt 1 never ended
    _record(twice, 4, JobAttempt.Outcome.DONE, now - timedelta(seconds=20))  # nor attempt 3
    page = admin_client.get(DASHBOARD).content.decode()
    verdict = re.sub(r"<[^>]+>", "", page[page.index('id="weave-verdict"') :].split("</div>")[0])
    assert "1 shipment job in the last hour had an attempt that never ended" in verdict
    assert "2 shipment jobs" not in verdict


def test_dashboard__past_the_named_jobs_one_more_job_is_said_in_the_singular(admin_client):
    now = db_now()
    jobs = [Shipment.objects.create(parcel=f"p{i}") for i in range(6)]
    for i, shipment in enumerate(jobs):  # six jobs, one failed attempt each: five named, one counted
        _record(shipment, 1, JobAttempt.Outcome.FAILED, now - timedelta(seconds=i + 1))
    page = admin_client.get(DASHBOARD).content.decode()
    verdict = re.sub(r"<[^>]+>", "", page[page.index('id="weave-verdict"') :].split("</div>")[0])
    assert f"shipment #{jobs[4].pk} and 1 more job)" in verdict
