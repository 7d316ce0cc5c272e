"""FCM topic subscriptions as fenced jobs on the legacy Instance ID batch API (`topic_api: "iid"`), against
the FCM fake's Instance ID endpoints over real HTTPS. The v1 API and the ordering of wishes: test_topic_wishes."""

import json
import threading
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connections

from notifications.models import Device, Notification, TopicSubscription
from notifications.services import device_register, topic_subscribe, topic_unsubscribe
from notifications.topics import JOB_TYPE, explain_topic_subscription
from weave.jobs.runner import run_job
from weave.models import JobAttempt, JobStepReceipt

TTL = 30
LIVE = ["live-" + "a" * 20, "live-" + "b" * 20]
DEAD = "dead-" + "c" * 20


@pytest.fixture
def fcm_site(settings, fcm, fcm_options):
    settings.WEAVE = {
        "PUSH_BACKENDS": {
            "fcm": {
                "BACKEND": "notifications.backends.fcm.FCMBackend",
                "OPTIONS": {**fcm_options, "iid_url": fcm.url, "topic_api": "iid"},
            }
        },
        "PUSH_TIMEOUT": 10.0,
        "PUSH_LEASE_TTL": float(TTL),
    }
    return fcm


@pytest.fixture
def devices(fcm_site):
    user = get_user_model().objects.create_user("subscriber")
    return [device_register(user=user, backend="fcm", token=token, platform="android") for token in [*LIVE, DEAD]]


def receipts(job):
    return list(JobStepReceipt.objects.filter(job_type=JOB_TYPE, job_id=str(job.pk)).values_list("owner", "result"))


@pytest.mark.django_db
def test_subscribe__applies_live_tokens_and_deactivates_the_dead_one_with_the_reason(fcm_site, devices, clock):
    queued = Notification.objects.create(device=devices[2], device_token=DEAD, backend="fcm", title="t")
    (job,) = topic_subscribe(topic="news", devices=Device.objects.filter(user=devices[0].user))

    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "done"

    assert fcm_site.iid.subscribers("news") == set(LIVE)
    (call,) = fcm_site.iid.calls
    assert (call.operation, call.topic, call.tokens, call.status) == ("add", "news", 3, 200)
    dead = Device.objects.get(pk=devices[2].pk)
    assert not dead.active and "answered NOT_FOUND" in dead.deactivation_reason and "'news'" in dead.deactivation_reason
    queued.refresh_from_db()
    assert queued.status == "failed" and "deactivated" in queued.last_error
    assert Device.objects.filter(pk__in=[d.pk for d in devices[:2]], active=True).count() == 2
    ((owner, result),) = receipts(job)
    assert owner == "w1" and result == {"codes": ["", "", "NOT_FOUND"], "deactivate": [[devices[2].pk, "NOT_FOUND"]]}
    story = explain_topic_subscription(job.pk, clock=clock).as_text()
    assert "2 applied, 1 NOT_FOUND" in story and f"devices deactivated: {devices[2].pk}" in story


@pytest.mark.django_db
def test_unsubscribe__removes_the_tokens_through_batch_remove(fcm_site, devices, clock):
    (add,) = topic_subscribe(topic="news", tokens=LIVE, backend="fcm")
    run_job(JOB_TYPE, add.pk, owner="w1", clock=clock)
    (remove,) = topic_unsubscribe(topic="/topics/news", tokens=LIVE[:1], backend="fcm")

    assert run_job(JOB_TYPE, remove.pk, owner="w1", clock=clock) == "done"

    assert fcm_site.iid.subscribers("news") == {LIVE[1]}
    assert [c.operation for c in fcm_site.iid.calls] == ["add", "remove"]


@pytest.mark.django_db
def test_job__a_503_is_retried_after_its_retry_after_and_then_lands(fcm_site, devices, clock):
    fcm_site.iid.script.append(503)
    fcm_site.iid.retry_after = "120"
    (job,) = topic_subscribe(topic="news", tokens=LIVE, backend="fcm")

    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "retry"
    job.refresh_from_db()
    assert job.state == "pending" and "HTTP 503 (Retry-After 120 s)" in job.last_error
    assert job.next_attempt_at >= clock.current + timedelta(seconds=120)  # IID's ask beats the first backoff
    assert receipts(job) == [] and fcm_site.iid.subscribers("news") == set()

    clock.advance(121)
    assert run_job(JOB_TYPE, job.pk, owner="w2", clock=clock) == "done"
    assert fcm_site.iid.subscribers("news") == set(LIVE)
    outcomes = JobAttempt.objects.filter(job_type=JOB_TYPE, job_id=str(job.pk)).order_by("number")
    assert list(outcomes.values_list("outcome", flat=True)) == ["retry", "done"]
    assert "503" in explain_topic_subscription(job.pk, clock=clock).as_text()


@pytest.mark.django_db
def test_job__a_token_answered_internal_sends_the_batch_again(fcm_site, devices, clock):
    fcm_site.iid.internal.add(LIVE[0])
    (job,) = topic_subscribe(topic="news", tokens=LIVE, backend="fcm")

    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "retry"
    assert "1 INTERNAL among 2 tokens" in TopicSubscription.objects.get(pk=job.pk).last_error
    clock.advance(600)
    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "done"
    assert fcm_site.iid.subscribers("news") == set(LIVE)


@pytest.mark.django_db
def test_job__an_unknown_project_fails_for_good_with_the_reason(fcm_site, devices, clock, settings):
    fcm_site.revoke_access_tokens()
    backends = settings.WEAVE["PUSH_BACKENDS"]
    options = {**backends["fcm"]["OPTIONS"], "iid_url": f"{fcm_site.url}/elsewhere"}
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"fcm": {**backends["fcm"], "OPTIONS": options}}}
    (job,) = topic_subscribe(topic="news", tokens=LIVE, backend="fcm")

    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "failed"
    job.refresh_from_db()
    assert job.state == "failed" and "IID refused the request (HTTP 404)" in job.last_error


@pytest.mark.django_db
def test_services__split_into_batches_of_a_thousand_and_run_after_commit(
    fcm_site, devices, django_capture_on_commit_callbacks
):
    tokens = [f"tok-{i:06d}-{'x' * 12}" for i in range(2001)]
    with django_capture_on_commit_callbacks() as callbacks:
        jobs = topic_subscribe(topic="news", tokens=[*tokens, tokens[0]], backend="fcm")

    assert [len(job.tokens) for job in jobs] == [1000, 1000, 1]
    assert [t for job in jobs for t in job.tokens] == tokens  # each once, in order
    assert len(callbacks) == 3  # one task per job, asked for when the transaction commits


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"topic": "news!", "tokens": LIVE, "backend": "fcm"}, "topic"),
        ({"topic": "x" * 901, "tokens": LIVE, "backend": "fcm"}, "topic"),
        ({"topic": "news", "tokens": LIVE}, "backend"),
        ({"topic": "news", "tokens": LIVE, "backend": "nope"}, "backend"),
        ({"topic": "news", "tokens": ["short"], "backend": "fcm"}, "tokens"),
        ({"topic": "news", "tokens": LIVE[0], "backend": "fcm"}, "tokens"),
        ({"topic": "news", "tokens": [], "backend": "fcm"}, "tokens"),
        ({"topic": "news"}, "devices"),
    ],
)
def test_services__refuse_bad_input_naming_the_field_and_store_nothing(fcm_site, kwargs, field):
    with pytest.raises(ValidationError) as caught:
        topic_subscribe(**kwargs)
    assert field in caught.value.message_dict
    assert not TopicSubscription.objects.exists()


@pytest.mark.django_db
def test_services__inactive_devices_are_left_out_and_named(fcm_site, devices):
    Device.objects.filter(pk=devices[2].pk).update(active=False)

    jobs = topic_subscribe(topic="news", devices=devices[:2] + [Device.objects.get(pk=devices[2].pk)])

    assert jobs[0].tokens == LIVE and jobs.skipped == {devices[2].pk: "inactive"}


# --- the fake refuses what IID refuses ------------------------------------------------------------


def iid_post(fcm, keys, body, *, auth=True, oauth_flag=True):
    from notifications.backends.credentials import GoogleAccessToken, tls_context

    headers = {"content-type": "application/json"}
    if auth:
        token = GoogleAccessToken(str(keys.fcm_service_account), ca_file=str(keys.ca_file)).get()
        headers["authorization"] = f"Bearer {token}"
    if oauth_flag:
        headers["access_token_auth"] = "true"
    with httpx.Client(verify=tls_context(str(keys.ca_file))) as client:
        return client.post(f"{fcm.url}/iid/v1:batchAdd", content=json.dumps(body), headers=headers)


@pytest.mark.parametrize(
    ("body", "auth", "flag", "status", "word"),
    [
        ({"to": "/topics/news", "registration_tokens": LIVE}, False, True, 401, "Unauthorized"),
        ({"to": "/topics/news", "registration_tokens": LIVE}, True, False, 401, "Unauthorized"),
        ({"to": "news", "registration_tokens": LIVE}, True, True, 400, "InvalidParameters: to"),
        ({"to": "/topics/new s", "registration_tokens": LIVE}, True, True, 400, "InvalidParameters: to"),
        ({"to": "/topics/news", "registration_tokens": []}, True, True, 400, "registration_tokens"),
        ({"to": "/topics/news", "registration_tokens": LIVE * 501}, True, True, 400, "registration_tokens"),
        ({"to": "/topics/news", "registration_tokens": [7]}, True, True, 400, "registration_tokens"),
    ],
)
def test_fake__refuses_what_iid_refuses(fcm, keys, body, auth, flag, status, word):
    answer = iid_post(fcm, keys, body, auth=auth, oauth_flag=flag)

    assert answer.status_code == status and word in answer.json()["error"]
    assert fcm.iid.subscribers("news") == set()


def test_fake__answers_one_result_per_token_in_order(fcm, keys):
    answer = iid_post(fcm, keys, {"to": "/topics/news", "registration_tokens": [LIVE[0], "bad token", DEAD]})

    assert answer.status_code == 200
    assert answer.json() == {"results": [{}, {"error": "INVALID_ARGUMENT"}, {"error": "NOT_FOUND"}]}


# --- a stale worker's results never land ------------------------------------------------------------


def _stall_the_whole_process(monkeypatch) -> None:
    """No heartbeat thread either: the stale worker cannot notice anything before it saves."""
    from weave.jobs import JobContext
    from weave.leases import Heartbeat

    def no_background(ctx):
        return Heartbeat(TopicSubscription.objects, ctx.lease, ttl=ctx.ttl, clock=ctx.clock, background=False)

    monkeypatch.setattr(JobContext, "heartbeat", no_background)


def _stale_beats_after(taken_over: threading.Event, monkeypatch) -> None:
    """The stale worker's heartbeat thread beats again only once the takeover is done. Moving the clock past
    its lease wakes that thread at once, and its renewal would otherwise race the rival's claim: when it
    wins, the refusal it records is an expiry, not the new fence the test looks for."""
    from weave.leases import Heartbeat

    tick = Heartbeat.tick

    def after_the_takeover(self):
        if self.lease.owner == "stale" and threading.current_thread().name.startswith("heartbeat-"):
            taken_over.wait(30)
        return tick(self)

    monkeypatch.setattr(Heartbeat, "tick", after_the_takeover)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("stall", "takeover"), [("call", "rival"), ("process", "rival"), ("process", "operator cancels")]
)
def test_job__a_lease_lost_mid_call_keeps_the_stale_workers_answer_out(
    fcm_site, devices, clock, monkeypatch, stall, takeover
):
    """The stale worker's call hangs inside the fake and its lease runs out; a rival does the whole job,
    or an operator cancels it (a new fence, and no receipt that could collide with the stale one).

    When the stale call is answered at last, IID calls a live token NOT_FOUND: had the stale worker's
    results landed, that device would be deactivated. With only the call stalled, the stale worker's
    heartbeat finds the lease gone; with the whole process stalled (no heartbeat thread either), the
    step's guarded save refuses them."""
    from weave.jobs.services import job_cancel

    taken_over = threading.Event()
    if stall == "process":
        _stall_the_whole_process(monkeypatch)
    else:
        _stale_beats_after(taken_over, monkeypatch)
    (job,) = topic_subscribe(topic="news", tokens=[*LIVE, DEAD], backend="fcm")
    gate = fcm_site.iid.hold()
    stale: dict = {}

    def run_stale() -> None:
        try:
            stale["outcome"] = run_job(JOB_TYPE, job.pk, owner="stale", clock=clock)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run_stale, name="stale-worker")
    thread.start()
    try:
        assert fcm_site.iid.arrived.wait(10), "the stale worker's call never reached the fake"
        clock.advance(TTL + 1)  # the stale worker stalls past its lease
        if takeover == "rival":
            assert run_job(JOB_TYPE, job.pk, owner="rival", clock=clock) == "done"
        else:
            assert job_cancel(job_type=JOB_TYPE, pks=[job.pk], clock=clock).changed == [job.pk]
        fcm_site.unregister(LIVE[0])  # what the stale call will now be told
    finally:
        taken_over.set()
        gate.set()
        thread.join(30)

    assert stale["outcome"] == "blocked"
    assert Device.objects.get(token=LIVE[0]).active  # the stale NOT_FOUND did not land
    stale_attempt = JobAttempt.objects.get(job_type=JOB_TYPE, job_id=str(job.pk), owner="stale")
    assert stale_attempt.outcome == "blocked" and "fence 2" in stale_attempt.reason
    row = TopicSubscription.objects.values("state", "fence", "owner").get(pk=job.pk)
    if takeover == "rival":
        assert [owner for owner, _ in receipts(job)] == ["rival"]
        assert not Device.objects.get(token=DEAD).active  # the rival's NOT_FOUND did
        assert row == {"state": "done", "fence": 2, "owner": None}
        # Both calls were answered. The rival's NOT_FOUND deactivated the dead device, which wished it out of
        # 'news' while the stale call was in flight: the stale worker, finding that newer wish, sent it.
        calls = [(c.operation, c.tokens, c.status) for c in fcm_site.iid.calls]
        assert calls == [("add", 3, 200), ("add", 3, 200), ("remove", 1, 200)]
    else:
        assert receipts(job) == []
        assert Device.objects.get(token=DEAD).active  # nobody's answer landed
        assert row == {"state": "cancelled", "fence": 2, "owner": None}


# --- the operator's view -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_explain_and_admin__show_the_story_of_a_topic_job(fcm_site, devices, clock, admin_client, capsys):
    from django.core.management import call_command
    from django.urls import reverse

    (job,) = topic_subscribe(topic="news", devices=devices)
    run_job(JOB_TYPE, job.pk, owner="w1", clock=clock)

    call_command("weave_explain", "fcm_topic", str(job.pk))
    printed = capsys.readouterr().out
    assert "subscribe 3 tokens to 'news'" in printed and "2 applied, 1 NOT_FOUND" in printed
    listing = admin_client.get(reverse("admin:weave_notifications_topicsubscription_changelist"))
    assert listing.status_code == 200 and "news" in listing.content.decode()
    page = admin_client.get(reverse("admin:weave_notifications_topicsubscription_change", args=[job.pk]))
    body = page.content.decode()
    assert page.status_code == 200 and "2 applied, 1 NOT_FOUND" in body and "fence 1 claimed by w1" in body
