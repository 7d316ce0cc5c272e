"""FCM topics on the v1 topic-subscription API, where the last wish per registration and topic wins.

Against the FCM fake over real HTTPS: subscribe, unsubscribe and list per registration; the issue's
lost opt-out (a subscribe retried after a later unsubscribe landed); a subscribe answered after a later
unsubscribe was sent; any interleaving of wishes, job runs, retries and 503s (hypothesis); a device that
leaves leaves its topics; and the fake refusing what the real API refuses.
"""

import json
import threading

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notifications.models import Device, TopicIntent, TopicSubscription
from notifications.services import (
    TopicLookupError,
    device_deactivate,
    device_register,
    topic_list,
    topic_subscribe,
    topic_unsubscribe,
)
from notifications.testing.keys import FCM_PROJECT_ID
from notifications.topics import ALREADY_APPLIED, JOB_TYPE
from weave.jobs.runner import run_job
from weave.models import JobStepReceipt

TOKEN = "live-" + "a" * 20
OTHER = "live-" + "b" * 20
DEAD = "dead-" + "c" * 20


@pytest.fixture
def fcm_site(settings, fcm, fcm_options):
    settings.WEAVE = {
        "PUSH_BACKENDS": {"fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options}},
        "PUSH_TIMEOUT": 10.0,
        "PUSH_LEASE_TTL": 30.0,
    }
    return fcm


def subscribed(fcm, token=TOKEN, topic="news") -> bool:
    return token in fcm.iid.subscribers(topic)


def v1_calls(fcm):
    return [(c.operation, c.registration, c.status) for c in fcm.iid.calls if c.api == "v1"]


def codes(job):
    receipt = JobStepReceipt.objects.get(job_type=JOB_TYPE, job_id=str(job.pk), step="call")
    return receipt.result["codes"]


@pytest.mark.django_db
def test_v1__subscribe_unsubscribe_and_list_one_registration_per_call(fcm_site, clock):
    user = get_user_model().objects.create_user("reader")
    device = device_register(user=user, backend="fcm", token=TOKEN, platform="android")
    jobs = [*topic_subscribe(topic="news", devices=[device]), *topic_subscribe(topic="sport", devices=[device])]
    assert [run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) for job in jobs] == ["done", "done"]

    assert topic_list(device=device) == ["news", "sport"]
    (job,) = topic_unsubscribe(topic="news", devices=[device])
    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "done"

    assert topic_list(device=device) == ["sport"]
    ops = [(op, status) for op, _, status in v1_calls(fcm_site)]
    assert ops == [("add", 200), ("add", 200), ("list", 200), ("remove", 200), ("list", 200)]
    assert {registration for _, registration, _ in v1_calls(fcm_site)} == {TOKEN}
    intent = TopicIntent.objects.get(registration=TOKEN, topic="news")
    assert (intent.subscribed, intent.version, intent.applied_version) == (False, 2, 2)


@pytest.mark.django_db
def test_v1__a_dead_registration_deactivates_its_device_and_an_unknown_list_is_refused(fcm_site, clock):
    user = get_user_model().objects.create_user("gone")
    live = device_register(user=user, backend="fcm", token=TOKEN)
    dead = device_register(user=user, backend="fcm", token=DEAD)
    (job,) = topic_subscribe(topic="news", devices=[live, dead])

    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "done"

    assert codes(job) == ["", "NOT_FOUND"]
    assert Device.objects.get(pk=live.pk).active and not Device.objects.get(pk=dead.pk).active
    with pytest.raises(TopicLookupError) as caught:
        topic_list(device=Device.objects.get(pk=dead.pk))
    assert not caught.value.temporary and "NOT_FOUND" in str(caught.value)


@pytest.mark.django_db
def test_last_wish_wins__a_retried_subscribe_after_a_later_unsubscribe_sends_nothing(fcm_site, clock):
    """The issue's story: add 503, then remove 200, then the add's retry. The user stays opted out."""
    fcm_site.iid.script.append(503)
    (add,) = topic_subscribe(topic="news", tokens=[TOKEN], backend="fcm")
    assert run_job(JOB_TYPE, add.pk, owner="w1", clock=clock) == "retry"
    (remove,) = topic_unsubscribe(topic="news", tokens=[TOKEN], backend="fcm")
    assert run_job(JOB_TYPE, remove.pk, owner="w1", clock=clock) == "done"

    clock.advance(600)
    assert run_job(JOB_TYPE, add.pk, owner="w2", clock=clock) == "done"

    assert not subscribed(fcm_site)
    assert [(op, status) for op, _, status in v1_calls(fcm_site)] == [("add", 503), ("remove", 200)]
    assert codes(add) == [ALREADY_APPLIED]  # the retry found the later wish applied and sent nothing


@pytest.mark.django_db(transaction=True)
def test_last_wish_wins__a_subscribe_answered_after_a_later_unsubscribe_is_undone(fcm_site, clock):
    """The subscribe's call waits inside FCM while the unsubscribe is wished and sent; FCM then applies the
    subscribe last. The subscribe's job finds a newer wish than the one it sent and sends that one."""
    (add,) = topic_subscribe(topic="news", tokens=[TOKEN], backend="fcm")
    gate = fcm_site.iid.hold()
    outcome: dict = {}

    def run_add() -> None:
        try:
            outcome["add"] = run_job(JOB_TYPE, add.pk, owner="slow", clock=clock)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run_add, name="slow-subscribe")
    thread.start()
    try:
        assert fcm_site.iid.arrived.wait(10), "the subscribe never reached the fake"
        (remove,) = topic_unsubscribe(topic="news", tokens=[TOKEN], backend="fcm")
        assert run_job(JOB_TYPE, remove.pk, owner="fast", clock=clock) == "done"
        assert not subscribed(fcm_site)
    finally:
        gate.set()
        thread.join(30)

    assert outcome["add"] == "done"
    assert not subscribed(fcm_site)
    # FCM saw: the unsubscribe, then the held subscribe, then the subscribe's job sending the newer wish.
    assert [(op, status) for op, _, status in v1_calls(fcm_site)] == [("remove", 200), ("add", 200), ("remove", 200)]
    intent = TopicIntent.objects.get(registration=TOKEN, topic="news")
    assert (intent.subscribed, intent.applied_version) == (False, intent.version)


# One step of a story: a wish, a run of one job so far (by its index), or FCM answering the next call 503.
STEPS = st.lists(
    st.one_of(
        st.sampled_from(["subscribe", "unsubscribe", "503"]),
        st.tuples(st.just("run"), st.integers(min_value=0, max_value=7)),
    ),
    min_size=1,
    max_size=12,
)


@pytest.fixture(params=["v1", "iid"])
def either_api(request, settings, fcm_site, fcm_options):
    """The site on FCM's v1 topic API, then on the legacy Instance ID batch API (the same fake state)."""
    options = {**fcm_options, "topic_api": request.param, "iid_url": fcm_site.url}
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"fcm": {**settings.WEAVE["PUSH_BACKENDS"]["fcm"],
                                                                  "OPTIONS": options}}}  # fmt: skip
    return fcm_site


@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_last_wish_wins__in_any_order_of_wishes_runs_retries_and_503s(either_api, clock, steps):
    fcm_site = either_api
    TopicIntent.objects.all().delete()
    TopicSubscription.objects.all().delete()
    fcm_site.reset()
    jobs: list[int] = []
    last = None
    failures = 0
    for step in steps:
        if step in ("subscribe", "unsubscribe"):
            call = topic_subscribe if step == "subscribe" else topic_unsubscribe
            jobs += [job.pk for job in call(topic="news", tokens=[TOKEN, OTHER], backend="fcm", clock=clock)]
            last = step
        elif step == "503" and failures < 3:  # fewer than a job's attempts: no job runs out of them
            failures += 1
            fcm_site.iid.script.append(503)
        elif isinstance(step, tuple) and jobs:
            run_job(JOB_TYPE, jobs[step[1] % len(jobs)], owner="w", clock=clock)
        clock.advance(1)
    for _ in range(8):  # the workers catch up: every job runs until none is left pending
        clock.advance(700)
        for pk in jobs:
            run_job(JOB_TYPE, pk, owner="w", clock=clock)
    assert not TopicSubscription.objects.filter(state="pending").exists()
    if last is not None:
        want = last == "subscribe"
        assert subscribed(fcm_site, TOKEN) is want and subscribed(fcm_site, OTHER) is want
        assert not TopicIntent.objects.exclude(applied_version=F("version")).exists()


@pytest.mark.django_db
def test_leaving__a_deactivated_device_is_unsubscribed_from_its_topics(
    fcm_site, clock, django_capture_on_commit_callbacks
):
    user = get_user_model().objects.create_user("leaver")
    device = device_register(user=user, backend="fcm", token=TOKEN)
    for topic in ("news", "sport"):
        (job,) = topic_subscribe(topic=topic, devices=[device])
        run_job(JOB_TYPE, job.pk, owner="w1", clock=clock)
    (kept,) = topic_subscribe(topic="weather", tokens=[OTHER], backend="fcm")
    run_job(JOB_TYPE, kept.pk, owner="w1", clock=clock)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        device_deactivate(device=device, reason="signed out")

    leaving = TopicSubscription.objects.filter(action="unsubscribe").order_by("topic")
    assert [(job.topic, job.tokens) for job in leaving] == [("news", [TOKEN]), ("sport", [TOKEN])]
    assert len(callbacks) == 2  # each job is asked for once the deactivation commits
    for job in leaving:
        assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "done"
    assert not subscribed(fcm_site, TOKEN, "news") and not subscribed(fcm_site, TOKEN, "sport")
    assert subscribed(fcm_site, OTHER, "weather")


@pytest.mark.django_db
def test_leaving__unsubscribe_takes_inactive_devices(fcm_site, clock):
    user = get_user_model().objects.create_user("inactive")
    device = device_register(user=user, backend="fcm", token=TOKEN)
    Device.objects.filter(pk=device.pk).update(active=False)

    (job,) = topic_unsubscribe(topic="news", devices=Device.objects.filter(pk=device.pk))

    assert job.tokens == [TOKEN]
    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "done"


# --- the fake refuses what the v1 API refuses ---------------------------------------------------------


def v1_request(fcm, keys, method, path, *, auth=True, body=None):
    from notifications.backends.credentials import GoogleAccessToken, tls_context

    headers = {"content-type": "application/json"}
    if auth:
        token = GoogleAccessToken(str(keys.fcm_service_account), ca_file=str(keys.ca_file)).get()
        headers["authorization"] = f"Bearer {token}"
    content = None if body is None else json.dumps(body)
    with httpx.Client(verify=tls_context(str(keys.ca_file))) as client:
        return client.request(method, f"{fcm.url}{path}", content=content, headers=headers)


BASE = f"/v1/projects/{FCM_PROJECT_ID}/registrations"


@pytest.mark.parametrize(
    ("method", "path", "auth", "status", "word"),
    [
        ("POST", f"{BASE}/{TOKEN}/topicSubscriptions?topicName=news", False, 401, "UNAUTHENTICATED"),
        (
            "POST",
            f"/v1/projects/other/registrations/{TOKEN}/topicSubscriptions?topicName=news",
            True,
            403,
            "PERMISSION",
        ),
        ("POST", f"{BASE}/{TOKEN}/topicSubscriptions?topicName=new%20s", True, 400, "topic"),
        ("POST", f"{BASE}/{TOKEN}/topicSubscriptions", True, 400, "topic"),
        ("POST", f"{BASE}/not%20a%20token/topicSubscriptions?topicName=news", True, 400, "INVALID_ARGUMENT"),
        ("POST", f"{BASE}/{DEAD}/topicSubscriptions?topicName=news", True, 404, "UNREGISTERED"),
        ("PUT", f"{BASE}/{TOKEN}/topicSubscriptions/news", True, 404, "Method not found"),
        ("POST", f"{BASE}/{TOKEN}/topicSubscriptions/news", True, 404, "Method not found"),
        ("DELETE", f"{BASE}/{TOKEN}/topicSubscriptions/news", True, 404, "not found"),
        ("GET", f"{BASE}/{TOKEN}/topicSubscriptions/news", True, 404, "not found"),
    ],
)
def test_fake__refuses_what_the_v1_api_refuses(fcm, keys, method, path, auth, status, word):
    answer = v1_request(fcm, keys, method, path, auth=auth, body={} if method == "POST" else None)

    assert answer.status_code == status and word in answer.text
    assert fcm.iid.subscribers("news") == set()


def test_fake__create_get_list_and_delete_a_subscription(fcm, keys):
    created = v1_request(fcm, keys, "POST", f"{BASE}/{TOKEN}/topicSubscriptions?topicName=news", body={})
    again = v1_request(fcm, keys, "POST", f"{BASE}/{TOKEN}/topicSubscriptions?topic_name=news", body={})
    got = v1_request(fcm, keys, "GET", f"{BASE}/{TOKEN}/topicSubscriptions/news")
    listed = v1_request(fcm, keys, "GET", f"{BASE}/{TOKEN}/topicSubscriptions?pageSize=1")
    deleted = v1_request(fcm, keys, "DELETE", f"{BASE}/{TOKEN}/topicSubscriptions/news")
    missing = v1_request(fcm, keys, "DELETE", f"{BASE}/{TOKEN}/topicSubscriptions/news?allowMissing=true")

    assert created.status_code == 200 and created.json()["topic_name"] == "news"
    assert created.json()["name"] == f"projects/{FCM_PROJECT_ID}/registrations/{TOKEN}/topicSubscriptions/news"
    assert again.status_code == 409 and "ALREADY_EXISTS" in again.text
    assert got.json() == created.json()
    assert [item["topic_name"] for item in listed.json()["topic_subscriptions"]] == ["news"]
    assert deleted.status_code == 200 and deleted.json() == {}
    assert missing.status_code == 200 and fcm.iid.subscribers("news") == set()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_last_wish_wins__racing_threads_of_wishes_and_jobs_end_where_the_last_wish_says(fcm_site, clock):
    """Eight threads wish and run jobs at once on the same registrations and topic, on PostgreSQL. Whatever
    order the statements and calls land in, once every job has run FCM holds what the newest wish says."""
    import random

    tokens = [TOKEN, OTHER]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def racer(seed: int) -> None:
        chooser = random.Random(seed)
        try:
            start.wait(10)
            for _ in range(4):
                call = topic_subscribe if chooser.random() < 0.5 else topic_unsubscribe
                for job in call(topic="news", tokens=tokens, backend="fcm", clock=clock):
                    run_job(JOB_TYPE, job.pk, owner=f"racer-{seed}", clock=clock)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=racer, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    for _ in range(3):  # what the racers left pending (a job that was busy under another's lease) runs now
        clock.advance(700)
        for pk in TopicSubscription.objects.filter(state="pending").values_list("pk", flat=True):
            run_job(JOB_TYPE, pk, owner="sweeper", clock=clock)

    assert not TopicSubscription.objects.filter(state="pending").exists()
    for token in tokens:
        wish = TopicIntent.objects.get(registration=token, topic="news")
        assert wish.applied_version == wish.version
        assert subscribed(fcm_site, token) is wish.subscribed


def test_setting__topic_api_takes_v1_or_iid_only(fcm_options):
    from notifications.backends.fcm import FCMBackend

    assert FCMBackend.check_options("fcm", {**fcm_options, "topic_api": "iid"}) == []
    assert FCMBackend.check_options("fcm", {**fcm_options, "topic_api": "v1"}) == []
    (problem,) = FCMBackend.check_options("fcm", {**fcm_options, "topic_api": "legacy"})
    assert "topic_api" in problem and '"iid"' in problem


@pytest.mark.django_db
def test_v1__listing_uses_the_v1_api_even_when_topic_jobs_use_iid(fcm_site, settings, fcm_options, clock):
    options = {**fcm_options, "topic_api": "iid", "iid_url": fcm_site.url}
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"fcm": {**settings.WEAVE["PUSH_BACKENDS"]["fcm"],
                                                                  "OPTIONS": options}}}  # fmt: skip
    user = get_user_model().objects.create_user("legacy")
    device = device_register(user=user, backend="fcm", token=TOKEN)
    (job,) = topic_subscribe(topic="news", devices=[device])
    run_job(JOB_TYPE, job.pk, owner="w1", clock=clock)

    assert topic_list(device=device) == ["news"]
    assert [(c.api, c.operation) for c in fcm_site.iid.calls] == [("iid", "add"), ("v1", "list")]
