"""The operator's screens tell the story: a verdict with named causes, linked counts, operator actions in the
timeline with every fence accounted for, actions only where they apply, human renderings."""

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.urls import reverse

from notifications.models import DeliveryAttempt, Notification
from onboarding.explain import explain_run
from onboarding.models import OnboardingRun, StepReceipt
from onboarding.runner import run_onboarding
from onboarding.services import onboarding_start
from onboarding.testing.numbers import german_iban
from tests.console.conftest import add_attempts
from tests.factories import NotificationFactory, OnboardingRunFactory, SupplierFactory
from weave.display import joined_reason, said_once
from weave.models import WorkerReport
from weave.reports import report_once
from weave.telemetry import REPORT_STALE, db_now

pytestmark = pytest.mark.django_db
DASHBOARD = "/admin/weave/dashboard/"
RUNS = reverse("admin:weave_onboarding_onboardingrun_changelist")
NOTIFICATIONS = reverse("admin:weave_notifications_notification_changelist")


def verdict(page: str) -> str:
    found = re.search(r'<div id="weave-verdict" class="weave-verdict (\w+)">(.*?)</div>', page, re.S)
    assert found, "the dashboard starts with a verdict"
    return found.group(1) + " " + found.group(2)


# --- the verdict -------------------------------------------------------------------------------------


def test_verdict__healthy_on_a_quiet_database_and_it_comes_first(admin_client):
    page = admin_client.get(DASHBOARD).content.decode()
    assert verdict(page).startswith("healthy")
    assert page.index('id="weave-verdict"') < page.index('id="weave-leases"')


def test_verdict__names_each_expired_lease_with_job_owner_fence_age_and_link(admin_client):
    held = NotificationFactory()
    Notification.objects.claim(held.pk, owner="push:frozen-host:7", ttl=-200)  # expired 200 s ago
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert text.startswith("failing")
    link = reverse("admin:weave_notifications_notification_change", args=[held.pk])
    assert f'<a href="{link}">notification #{held.pk}</a>' in text
    assert "push:frozen-host:7" in text and "at fence 1" in text and re.search(r"expired 3 min \d+ s ago", text)
    assert "under fence 2" in text


def due_behind_an_expired_lease() -> None:
    """A notification due 5 minutes ago, held by push:stalled:9 at fence 1 under a lease that has expired."""
    due = NotificationFactory(next_attempt_at=db_now() - timedelta(minutes=5))
    Notification.objects.claim(due.pk, owner="push:stalled:9", ttl=-60)
    Notification.objects.filter(pk=due.pk).update(next_attempt_at=db_now() - timedelta(minutes=5))


def test_verdict__ties_a_waiting_backlog_to_the_expired_lease_that_holds_it(admin_client):
    due_behind_an_expired_lease()
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert "1 notification due</a>, the oldest waiting 5 min" in text
    assert "held by push:stalled:9 (fence 1) whose lease expired" in text
    assert "due=now&amp;lease=expired" in text


def test_verdict__a_backlog_no_lease_holds_names_the_live_workers_in_a_proper_singular_or_plural(admin_client):
    NotificationFactory(next_attempt_at=db_now() - timedelta(minutes=5))
    report_once("host-a:1")
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert "1 live worker, not holding these rows: the workers are not keeping up." in text
    report_once("host-b:2")
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert "2 live workers, none of them holding these rows: the workers are not keeping up." in text


def test_verdict__one_row_an_expired_lease_holds_is_taken_over_as_it(admin_client):
    due_behind_an_expired_lease()
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert "that worker died or froze, and the next claim takes it over" in text


def test_verdict__degraded_by_a_failed_run_with_a_link_to_it(admin_client):
    OnboardingRunFactory(status=OnboardingRun.Status.FAILED)
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert text.startswith("degraded")
    assert f'href="{RUNS}?status__exact=failed">1 failed run</a>' in text


def test_verdict__no_live_worker_when_every_report_is_stale(admin_client):
    report_once("host-a:1")
    WorkerReport.objects.update(seen_at=db_now() - REPORT_STALE - timedelta(seconds=5))
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert text.startswith("failing") and "No live worker" in text


def test_tiles_link_to_the_rows_they_count(admin_client):
    NotificationFactory(status=Notification.Status.FAILED)
    NotificationFactory(next_attempt_at=db_now() - timedelta(seconds=5))
    page = admin_client.get(DASHBOARD).content.decode()
    assert f'<a class="weave-stat" href="{NOTIFICATIONS}?status__exact=failed">' in page
    assert f'<a class="weave-stat" href="{NOTIFICATIONS}?due=now">' in page
    # ... and the links really filter: the failed one only, the due one only.
    failed = admin_client.get(NOTIFICATIONS, {"status__exact": "failed"})
    assert [n.status for n in failed.context["cl"].result_list] == ["failed"]
    due = admin_client.get(NOTIFICATIONS, {"due": "now"})
    assert [n.status for n in due.context["cl"].result_list] == ["pending"]
    attempts = reverse("admin:weave_onboarding_runattempt_changelist")
    assert f'href="{attempts}?outcome=blocked&amp;ended=24h"' in page


# --- configuration as the workers run it, and the TTL panel ----------------------------------------------


def test_workers_report_their_config_and_the_ttl_panel_uses_it(admin_client, settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "ONBOARDING_LEASE_TTL": 10.0}
    report_once("worker-host:42")  # the worker runs with 10 s
    settings.WEAVE = {**settings.WEAVE, "ONBOARDING_LEASE_TTL": 30.0}  # the web process reads 30 s
    add_attempts(3, latency_ms=100)
    page = admin_client.get(DASHBOARD).content.decode()
    workers = page[page.index('id="weave-workers"') :]
    assert "worker-host:42" in workers
    assert re.search(
        r"<td[^>]*>ONBOARDING_LEASE_TTL</td><td[^>]*>10</td><td[^>]*><span class=\"weave-warn\">30</span></td>", workers
    )
    assert "not enough data (3 of 20 samples)" in page  # the threshold is stated


def test_ttl_panel__warns_when_the_ttl_is_far_above_the_need(admin_client, settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_LEASE_TTL": 60.0}
    add_attempts(30, latency_ms=100)
    page = admin_client.get(DASHBOARD).content.decode()
    assert "a crashed worker&#x27;s job is taken over only after 60 s (needs 2 s)" in page
    # One formula, whose figures add up on the row: p99 + heartbeat + margin -> needed.
    assert "0.10 + 0.55 + 1.00 → 2 s" in page  # 1.5 x (0.10 + 1.00) = 1.65, its third 0.55, rounded up to 2


def test_weave_tune__prints_the_ttl_the_workers_run_with(settings, capsys):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_LEASE_TTL": 12.0}
    report_once("worker-host:43")
    settings.WEAVE = {**settings.WEAVE, "PUSH_LEASE_TTL": 30.0}
    add_attempts(25, latency_ms=100)
    call_command("weave_tune")
    out = capsys.readouterr().out
    assert "PUSH_LEASE_TTL 12 s (this process reads 30 s)" in out
    assert "PUSH_LEASE_TTL=12 s" in out


# --- operator actions in the story -----------------------------------------------------------------------


@pytest.fixture
def bank_refused(fake_services):
    supplier = SupplierFactory()
    fake_services.config.refused_ibans = [supplier.iban]
    run = onboarding_start(supplier=supplier, started_by=None)
    assert run_onboarding(run.pk, background=False) == "failed"
    return OnboardingRun.objects.get(pk=run.pk)


def test_retry_in_the_admin__is_a_reopen_event_with_its_note_and_every_fence_is_accounted_for(
    admin_client, bank_refused
):
    run = bank_refused
    run.supplier.iban = german_iban(424242)
    run.supplier.save()
    admin_client.post(
        RUNS, {"action": "retry_failed", "_selected_action": [run.pk], "post": "yes", "why": "IBAN corrected"}
    )
    assert run_onboarding(run.pk, background=False) == "completed"
    text = explain_run(run.pk).as_text()
    lines = text.splitlines()
    failed = next(i for i, line in enumerate(lines) if " failed " in line and "fence 1" in line)
    reopened = next(i for i, line in enumerate(lines) if " reopened " in line)
    claim3 = next(i for i, line in enumerate(lines) if "fence 3 claimed" in line)
    assert failed < reopened < claim3, text
    assert "by admin: Re-opened under fence 2 (it failed at fence 1): IBAN corrected" in lines[reopened]
    assert "Fences: 1 claimed by" in text and "2 re-opened by admin's retry; 3 claimed by" in text
    # The change page's timeline tells the same, highlighted as a person's action.
    page = admin_client.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk])).content.decode()
    assert '<tr class="operator">' in page and "IBAN corrected" in page


def test_cancel_and_start_in_the_admin__appear_in_the_timeline_with_who(admin_client, fake_services):
    supplier = SupplierFactory()
    suppliers = reverse("admin:weave_onboarding_supplier_changelist")
    admin_client.post(suppliers, {"action": "start_onboarding", "_selected_action": [supplier.pk], "index": 0})
    run = OnboardingRun.objects.get(supplier=supplier)
    admin_client.post(RUNS, {"action": "cancel", "_selected_action": [run.pk], "index": 0})
    text = explain_run(run.pk).as_text()
    assert re.search(r"started\s+by admin: Started onboarding for ", text)
    assert re.search(r"cancelled\s+by admin: Cancelled \(it was pending at fence 0\)", text)


def test_operator_history_is_stamped_by_the_database_clock(admin_client):
    row = NotificationFactory(status=Notification.Status.FAILED)
    before = db_now()
    admin_client.post(NOTIFICATIONS, {"action": "retry_now", "_selected_action": [row.pk], "index": 0})
    entry = LogEntry.objects.get(object_id=str(row.pk))
    assert before <= entry.action_time <= db_now()
    from notifications.explain import explain_notification

    assert re.search(r"retried\s+by admin: Retry now requested", explain_notification(row.pk).as_text())


# --- actions only where they apply -----------------------------------------------------------------------


def test_retry_on_completed_runs__no_confirmation_page_just_the_reason(admin_client):
    done = OnboardingRunFactory(status=OnboardingRun.Status.COMPLETED)
    OnboardingRunFactory(status=OnboardingRun.Status.FAILED)  # so the action is offered at all
    response = admin_client.post(
        RUNS, {"action": "retry_failed", "_selected_action": [done.pk], "index": 0}, follow=True
    )
    page = response.content.decode()
    assert "What was fixed?" not in page
    assert (
        "Retry applies only to failed runs whose cause can be fixed; not to the selected: "
        f"#{done.pk} (completed: only a failed run can be retried)." in page
    )


def test_actions_menu_offers_only_what_applies(admin_client):
    OnboardingRunFactory(status=OnboardingRun.Status.COMPLETED)
    form = admin_client.get(RUNS).context["action_form"]  # None: no action applies to any run at all
    names = {name for name, _ in form.fields["action"].choices} if form else set()
    assert "retry_failed" not in names and "cancel" not in names and "cancel_and_undo" not in names


def test_cancel_and_undo__confirmation_lists_only_runs_it_applies_to(admin_client):
    done = OnboardingRunFactory(status=OnboardingRun.Status.COMPLETED)
    failed = OnboardingRunFactory(status=OnboardingRun.Status.FAILED)
    page = admin_client.post(
        RUNS, {"action": "cancel_and_undo", "_selected_action": [done.pk, failed.pk], "index": 0}
    ).content.decode()
    to_undo = page[page.index("To cancel and undo:") : page.index("Left alone:")]
    assert f"Run {failed.pk} " in to_undo and f"Run {done.pk} " not in to_undo
    assert f"Run {done.pk} for" in page[page.index("Left alone:") :] and "completed: nothing to cancel" in page
    assert f'name="_selected_action" value="{done.pk}"' not in page


def test_no_view_site_link(admin_client):
    assert "View site" not in admin_client.get(reverse("admin:index")).content.decode()


# --- human renderings --------------------------------------------------------------------------------


def test_notification_list__reason_clipped_with_the_whole_text_in_its_title(admin_client):
    reason = "Provider answered HTTP 410: the device token is no longer registered " * 3
    NotificationFactory(status=Notification.Status.FAILED, last_error=reason.strip())
    page = admin_client.get(NOTIFICATIONS).content.decode()
    assert f'<span class="weave-clip" title="{reason.strip()}"' in page
    assert "weave/console.css" in page


def test_delivered_notification__shows_no_next_attempt_and_its_data_as_a_table(admin_client):
    row = NotificationFactory(status=Notification.Status.DELIVERED, data={"order": "A-17", "count": 2})
    Notification.objects.filter(pk=row.pk).update(fence=1)
    page = admin_client.get(reverse("admin:weave_notifications_notification_change", args=[row.pk])).content.decode()
    assert "delivered: no next attempt" in page
    assert '<table class="weave-kv"><tbody>' in page  # key order is the database's (jsonb sorts keys)
    assert '<tr><th scope="row">order</th><td>A-17</td></tr>' in page and '<th scope="row">count</th><td>2</td>' in page


def test_web_push_token_is_masked_to_its_push_service(admin_client):
    token = '{"endpoint": "https://fcm.googleapis.com/fcm/send/abcdefSECRET123456", "keys": {"auth": "x"}}'
    NotificationFactory(device_token=token)
    page = admin_client.get(NOTIFICATIONS).content.decode()
    assert "Web Push · fcm.googleapis.com …123456" in page and "SECRET" not in page


def test_run_page__plan_as_step_names_and_committed_rows_as_labelled_fields(admin_client, fake_services):
    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    assert run_onboarding(run.pk, background=False) == "completed"
    page = admin_client.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk])).content.decode()
    assert '<li title="onboarding.steps.builtin.verify_tax_id">verify_tax_id</li>' in page
    assert "{&#x27;" not in page  # no Python dict shown
    assert StepReceipt.objects.filter(run=run).exists() and '<table class="weave-kv">' in page


def test_reasons_are_said_once():
    assert said_once("failed at register_bank_account: register_bank_account: closed") == (
        "failed at register_bank_account: closed"
    )
    assert joined_reason("Lease lost at verify_tax_id", "Lease lost on run 2 (renewal refused)") == (
        "Lease lost at verify_tax_id, on run 2 (renewal refused)"
    )
    assert said_once("HTTP 500: upstream down") == "HTTP 500: upstream down"


def test_charts_have_a_data_table_and_series_differ_by_more_than_colour(admin_client):
    add_attempts(4, latency_ms=120)
    add_attempts(2, outcome=DeliveryAttempt.Outcome.TEMPORARY, latency_ms=300)
    page = admin_client.get(DASHBOARD).content.decode()
    assert "<summary>Data table: Delivery attempts per minute" in page
    assert '<th scope="col">delivered</th><th scope="col">retrying</th><th scope="col">failed</th>' in page
    assert 'stroke-dasharray="7 4"' in page  # p95 dashed
    assert "(dashed line, square markers)" in page and 'fill="url(#' in page
    assert "(per minute) (per minute)" not in page


def test_edit_and_send_test_in_the_admin__are_events_in_the_notification_timeline(admin_client, settings):
    from notifications.explain import explain_notification
    from notifications.models import Device

    row = NotificationFactory(title="Before")
    change = reverse("admin:weave_notifications_notification_change", args=[row.pk])
    inline = {"delivery_attempts-TOTAL_FORMS": "0", "delivery_attempts-INITIAL_FORMS": "0"}
    admin_client.post(change, {"title": "After", "body": "b", "data": "{}", **inline})
    assert Notification.objects.get(pk=row.pk).title == "After"
    assert re.search(r"edited\s+by admin: Changed Title", explain_notification(row.pk).as_text())

    device = Device.objects.create(backend="default", token="test-device-token-0001", platform="ios")
    devices = reverse("admin:weave_notifications_device_changelist")
    admin_client.post(devices, {"action": "send_test_notification", "_selected_action": [device.pk], "index": 0})
    sent = Notification.objects.get(device=device)
    assert re.search(r"send-test\s+by admin: Sent as a test to device", explain_notification(sent.pk).as_text())


def test_a_running_run_with_a_live_owner_never_says_it_waits_for_a_worker(admin_client):
    run = OnboardingRunFactory(reason="Waiting for a worker.")
    OnboardingRun.objects.claim(run.pk, owner="onboarding:busy:1", ttl=60)
    OnboardingRun.objects.filter(pk=run.pk).update(status=OnboardingRun.Status.RUNNING)
    page = admin_client.get(RUNS).content.decode()
    assert "Waiting for a worker" not in page and "held by onboarding:busy:1 (lease live)" in page
    assert "Waiting for a worker" not in explain_run(run.pk).as_text()


def test_weave_explain_without_debug__one_clear_line_no_traceback():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}}
    env.update(WEAVE_PUSH_URL="", WEAVE_PUSH_TOKEN="")
    result = subprocess.run(
        [sys.executable, "manage.py", "weave_explain", "run", "1"], cwd=root, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "DEBUG is off" in result.stderr and "DEBUG=true" in result.stderr


def test_verdict__one_reason_per_dead_worker_naming_each_row_of_its_batch(admin_client):
    rows = [NotificationFactory() for _ in range(3)]
    for row in rows:
        Notification.objects.claim(row.pk, owner="push:dead-host:5", ttl=-10)
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert text.count("push:dead-host:5") == 1 and "Expired leases:" in text
    assert all(f"notification #{row.pk}</a>" in text for row in rows)


def test_notification_story__accounts_for_a_fence_whose_claim_sent_nothing():
    from notifications.explain import explain_notification

    row = NotificationFactory()
    Notification.objects.claim(row.pk, owner="push:a:1", ttl=-1)  # fence 1: claimed, released unstarted
    Notification.objects.claim(row.pk, owner="push:b:2", ttl=30)  # fence 2: sends
    now = db_now()
    DeliveryAttempt.objects.create(
        notification=row, owner="push:b:2", fence=2, started_at=now, finished_at=now, outcome="delivered"
    )
    summary = explain_notification(row.pk).summary
    assert "Fences: 1 taken by a claim that recorded no attempt (released unstarted); 2 claimed by push:b:2" in summary


def test_backlog_cause__the_breaker_when_it_opened_within_its_cooldown(admin_client):
    from notifications.models import BreakerOpening

    NotificationFactory(next_attempt_at=db_now() - timedelta(minutes=3))
    BreakerOpening.objects.create(opened_at=db_now(), owner="push:h:1", reason="Circuit breaker opened: HTTP 503")
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert "the breaker opened at" in text and "HTTP 503" in text


def test_supplier_page__lists_its_runs_with_status_and_offers_start(admin_client):
    run = OnboardingRunFactory(status=OnboardingRun.Status.FAILED, reason="verify_tax_id: not registered")
    supplier = run.supplier
    page = admin_client.get(reverse("admin:weave_onboarding_supplier_change", args=[supplier.pk])).content.decode()
    assert f'run #{run.pk}</a></td><td data-label="status">failed</td>' in page and "not registered" in page
    assert 'name="action" value="start_onboarding"' in page and f'name="_selected_action" value="{supplier.pk}"' in page
    suppliers = reverse("admin:weave_onboarding_supplier_changelist")
    admin_client.post(suppliers, {"action": "start_onboarding", "_selected_action": [supplier.pk]})
    assert OnboardingRun.objects.filter(supplier=supplier, status=OnboardingRun.Status.PENDING).exists()


# --- a row's actions: offered where they apply, disabled with the reason elsewhere ----------------------


def row_actions(page: str) -> dict[str, str]:
    """{action: "" when offered, else the reason shown beside its disabled button}, from a row's page."""
    assert page.count('id="weave-row-actions"') == 1  # one box, whichever template draws it
    found = {}
    for name, body in re.findall(r'<li class="weave-action-\w+" data-action="(\w+)">(.*?)</li>', page, re.S):
        why = re.search(r'<span class="weave-why" id="weave-why-\w+">Not available: (.*?)</span>', body, re.S)
        if why:
            assert re.search(r"<button type=\"button\" disabled aria-describedby=\"weave-why-\w+\">", body)
            found[name] = why.group(1)
        else:
            assert f'name="action" value="{name}"' in body and 'type="submit"' in body
            found[name] = ""
    return found


def test_delivered_notification__its_page_shows_retry_and_cancel_disabled_with_the_reason(admin_client):
    row = NotificationFactory(status=Notification.Status.DELIVERED, delivered_at=db_now())
    page = admin_client.get(reverse("admin:weave_notifications_notification_change", args=[row.pk])).content
    actions = row_actions(page.decode())
    assert set(actions) == {"retry_now", "cancel"}
    assert re.fullmatch(r"delivered at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: nothing to retry", actions["retry_now"])
    assert actions["cancel"].endswith(": too late to cancel")


def test_failed_notification__retry_offered_cancel_disabled_and_the_button_works(admin_client):
    row = NotificationFactory(status=Notification.Status.FAILED)
    page = admin_client.get(reverse("admin:weave_notifications_notification_change", args=[row.pk])).content.decode()
    actions = row_actions(page)
    assert actions == {"retry_now": "", "cancel": "failed: nothing is queued to cancel"}
    assert f'action="{NOTIFICATIONS}"' in page and f'name="_selected_action" value="{row.pk}"' in page
    admin_client.post(NOTIFICATIONS, {"action": "retry_now", "_selected_action": [row.pk]})  # what the button posts
    assert Notification.objects.get(pk=row.pk).status == Notification.Status.PENDING


def test_notification_held_by_a_live_lease__actions_disabled_naming_the_holder(admin_client):
    row = NotificationFactory()
    Notification.objects.claim(row.pk, owner="push:busy-host:3", ttl=60)
    page = admin_client.get(reverse("admin:weave_notifications_notification_change", args=[row.pk])).content.decode()
    actions = row_actions(page)
    assert actions["retry_now"].startswith("a worker holds it right now (push:busy-host:3, fence 1)")
    assert actions["cancel"] == actions["retry_now"]


def test_notification_actions__left_out_of_the_menu_and_refused_in_one_line_where_none_applies(admin_client):
    done = NotificationFactory(status=Notification.Status.DELIVERED, delivered_at=db_now())
    form = admin_client.get(NOTIFICATIONS).context["action_form"]
    names = {name for name, _ in form.fields["action"].choices} if form else set()
    assert "retry_now" not in names and "cancel" not in names
    NotificationFactory()  # a pending one: now "Retry now" and "Cancel" are offered
    response = admin_client.post(
        NOTIFICATIONS, {"action": "cancel", "_selected_action": [done.pk], "index": 0}, follow=True
    )
    text = " ".join(str(m) for m in response.context["messages"])
    assert "Cancel applies only to pending notifications that no worker holds; not to the selected: " in text
    assert f"#{done.pk} (delivered at " in text
    assert Notification.objects.get(pk=done.pk).status == "delivered" and not LogEntry.objects.exists()
    offered = admin_client.get(NOTIFICATIONS).context["action_form"].fields["action"].choices
    assert "retry_now" in {name for name, _ in offered}


def test_inactive_device__send_test_and_deactivate_disabled_with_the_reason(admin_client):
    from notifications.models import Device
    from notifications.services import device_deactivate

    device = Device.objects.create(backend="default", token="tok-abcdefghijklmnop", platform="android")
    device_deactivate(device=device, reason="The provider said the token is unregistered.")
    page = admin_client.get(reverse("admin:weave_notifications_device_change", args=[device.pk])).content.decode()
    actions = row_actions(page)
    assert re.fullmatch(
        r"inactive since \S+ \S+ UTC \(The provider said the token is unregistered\): a notification to it would "
        r"fail at once",
        actions["send_test_notification"],
    ), actions
    assert actions["deactivate"].startswith("already inactive since")
    devices = reverse("admin:weave_notifications_device_changelist")
    admin_client.post(devices, {"action": "send_test_notification", "_selected_action": [device.pk], "index": 0})
    assert not Notification.objects.exists(), "refused: nothing was queued for an inactive device"


def test_completed_run__its_page_offers_no_action_that_cannot_apply(admin_client):
    run = OnboardingRunFactory(status=OnboardingRun.Status.COMPLETED)
    page = admin_client.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[run.pk])).content.decode()
    actions = row_actions(page)
    assert actions["retry_failed"] == "completed: only a failed run can be retried"
    assert actions["resume"] == "completed: only a pending or running run can be resumed"
    assert actions["cancel_and_undo"] == "completed: nothing to cancel"
    failed = OnboardingRunFactory(status=OnboardingRun.Status.FAILED, failure_fixable=False)
    page = admin_client.get(reverse("admin:weave_onboarding_onboardingrun_change", args=[failed.pk])).content.decode()
    assert row_actions(page)["retry_failed"].startswith("it failed for a reason a retry cannot fix")
    assert row_actions(page)["cancel_and_undo"] == ""


def test_supplier_with_an_active_run__start_disabled_naming_the_run(admin_client):
    run = OnboardingRunFactory()
    page = admin_client.get(reverse("admin:weave_onboarding_supplier_change", args=[run.supplier.pk])).content
    assert row_actions(page.decode()) == {
        "start_onboarding": f"run {run.pk} is pending: wait for it to finish, or cancel it"
    }


# --- stuck notification leases, and the backlog's causes -------------------------------------------------


def test_stuck_notification_lease__named_with_holder_fence_and_when_it_runs_out(admin_client, settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_LEASE_TTL": 30.0}
    stuck, healthy = NotificationFactory(), NotificationFactory()
    Notification.objects.claim(stuck.pk, owner="push:frozen-host:11:aa", ttl=5)  # 5 s of 30 left: renewal missed
    Notification.objects.claim(healthy.pk, owner="push:busy-host:12:bb", ttl=29)
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    link = reverse("admin:weave_notifications_notification_change", args=[stuck.pk])
    assert text.startswith("degraded")
    named = f'Stuck lease: <a href="{link}">notification #{stuck.pk}</a>'
    assert f"{named} held by push:frozen-host:11:aa at fence 1" in text
    assert re.search(r"has [45] s left of its 30 s lease", text) and "under fence 2" in text
    assert "busy-host" not in text, "a lease renewed on time is not stuck"


def test_stuck_lease__judged_by_the_ttl_the_workers_report(admin_client, settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_LEASE_TTL": 300.0}  # the web process reads 300 s
    report_once("host-a:1")  # ... and the worker reports what it runs with
    WorkerReport.objects.update(config={"PUSH_LEASE_TTL": 12.0})
    row = NotificationFactory()
    Notification.objects.claim(row.pk, owner="push:host-a:1:cc", ttl=8)  # 8 of 12 s left: on time
    assert "Stuck lease" not in verdict(admin_client.get(DASHBOARD).content.decode())
    Notification.objects.claim(NotificationFactory().pk, owner="push:host-a:1:dd", ttl=1)
    assert "Stuck lease" in verdict(admin_client.get(DASHBOARD).content.decode())


def test_backlog_cause__names_every_dead_holder_and_the_breaker_together(admin_client):
    from notifications.models import BreakerOpening

    for owner in ("push:dead-a:1", "push:dead-b:2"):
        row = NotificationFactory()
        Notification.objects.claim(row.pk, owner=owner, ttl=-60)
        Notification.objects.filter(pk=row.pk).update(next_attempt_at=db_now() - timedelta(minutes=3))
    BreakerOpening.objects.create(opened_at=db_now(), owner="push:h:1", reason="Circuit breaker opened: HTTP 503")
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    backlog = text[text.index("2 notifications due</a>") :].split("</li>")[0]
    assert "1 of them held by push:dead-a:1 (fence 1) whose lease expired 1 min" in backlog
    assert "1 of them held by push:dead-b:2 (fence 1)" in backlog
    assert "the breaker opened at" in backlog and "by push:h:1" in backlog and "opened=15m" in backlog


def test_stuck_leases_of_one_worker__one_reason_naming_each_row(admin_client, settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_LEASE_TTL": 30.0}
    rows = [NotificationFactory() for _ in range(3)]
    for row in rows:
        Notification.objects.claim(row.pk, owner="push:frozen:5:ee", ttl=4)
    text = verdict(admin_client.get(DASHBOARD).content.decode())
    assert text.count("push:frozen:5:ee") == 1 and "Stuck leases:" in text
    assert all(f"notification #{row.pk}</a>" in text for row in rows)


def test_device_page__token_masked_platform_named_and_no_token_in_its_title(admin_client):
    from notifications.models import Device

    endpoint = '{"endpoint": "https://fcm.googleapis.com/fcm/send/abcdefSECRET123456", "keys": {"p256dh": "x"}}'
    device = Device.objects.create(backend="webpush", token=endpoint, platform="web")
    page = admin_client.get(reverse("admin:weave_notifications_device_change", args=[device.pk])).content.decode()
    assert "SECRET" not in page and "p256dh" not in page and "{&quot;endpoint" not in page
    assert "Web Push · fcm.googleapis.com …123456" in page
    add = admin_client.get(reverse("admin:weave_notifications_device_add")).content.decode()
    assert '<option value="ios">iOS</option>' in add and "Ios" not in add


def test_receipt_and_attempt_pages__output_as_fields_and_the_whole_reason(admin_client, fake_services):
    run = OnboardingRunFactory()
    assert run_onboarding(run.pk, background=False) == "completed"
    receipt = StepReceipt.objects.filter(run=run).order_by("pk").first()
    page = admin_client.get(reverse("admin:weave_onboarding_stepreceipt_change", args=[receipt.pk])).content.decode()
    assert '<table class="weave-kv">' in page and "{&quot;" not in page
    row = NotificationFactory()
    now = db_now()
    long_reason = "The provider failed (HTTP 503). " * 8
    attempt = DeliveryAttempt.objects.create(
        notification=row, owner="push:a:1", fence=1, started_at=now, finished_at=now, outcome="temporary",
        reason=long_reason,
    )  # fmt: skip
    url = reverse("admin:weave_notifications_deliveryattempt_change", args=[attempt.pk])
    page = admin_client.get(url).content.decode()
    assert long_reason.strip() in page and "weave-clip" not in page
