"""Firebase installation IDs beside registration tokens: stored as "fid:<FID>", sent as FCM's `fid` target,
registered through the device endpoint, and used as the registration of topic calls."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.test import Client

from notifications.backends.base import Outcome, TokenError
from notifications.backends.fcm import FCMBackend, fcm_message
from notifications.models import Device
from notifications.services import device_register, notification_create, topic_list, topic_subscribe
from notifications.topics import JOB_TYPE
from tests.notifications.backends.conftest import message, run, send_all
from weave.jobs.runner import run_job

FID = "cAbCdEfGhIjKlMnOpQrStU"  # 22 characters, starting c: an installation ID's shape


@pytest.mark.parametrize("fid", ["fid:" + FID, "fid:f" + "-" * 21, "fid:d_9" + "Z" * 19])
def test_canonical__an_installation_id_is_taken_unchanged(fid):
    assert FCMBackend.canonical_token(fid) == fid


@pytest.mark.parametrize(
    "bad", ["fid:", "fid:" + FID[:-1], "fid:" + FID + "x", "fid:a" + FID[1:], "fid:" + FID[:-1] + "!", "fid:fid:x"]
)
def test_canonical__a_malformed_installation_id_is_refused(bad):
    with pytest.raises(TokenError, match="installation ID"):
        FCMBackend.canonical_token(bad)


def test_message__an_installation_id_goes_as_the_fid_target_and_nothing_else():
    body = fcm_message(message("fid:" + FID), None)["message"]

    assert body["fid"] == FID and "token" not in body and "topic" not in body


def test_send__the_fake_delivers_to_an_installation_id_and_refuses_a_malformed_one(fcm, fcm_backend):
    good, bad = run(send_all(fcm_backend, [message("fid:" + FID), message("fid:" + FID[:-1] + "*")]))

    assert good.outcome == Outcome.DELIVERED
    (delivery,) = fcm.deliveries()
    assert delivery.message["fid"] == FID and "token" not in delivery.message
    # FCM names message.fid in its refusal: the target itself is bad, so the device goes.
    assert bad.outcome == Outcome.PERMANENT and bad.token_invalid and "installation ID" in bad.reason


def test_send__an_unregistered_installation_id_deactivates(fcm, fcm_backend):
    fcm.unregister(FID)

    (result,) = run(send_all(fcm_backend, [message("fid:" + FID)]))

    assert result.outcome == Outcome.PERMANENT and result.token_invalid and "UNREGISTERED" in result.reason


@pytest.fixture
def fcm_site(settings, fcm, fcm_options):
    settings.WEAVE = {
        "PUSH_BACKENDS": {"fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options}},
        "PUSH_TIMEOUT": 10.0,
    }
    cache.clear()
    return fcm


@pytest.mark.django_db
def test_single_send__a_raw_installation_id_is_a_target(fcm_site):
    row = notification_create(title="t", body="b", device_token=" fid:" + FID + " ", backend="fcm")

    assert row.device_token == "fid:" + FID
    with pytest.raises(ValidationError) as caught:
        notification_create(title="t", body="b", device_token="fid:nope", backend="fcm")
    assert "device_token" in caught.value.message_dict or "token" in str(caught.value)


@pytest.mark.django_db
def test_endpoint__an_app_registers_its_installation_id_and_unregisters_it(fcm_site):
    user = get_user_model().objects.create_user("fid-user", password="pw")
    client = Client()
    client.force_login(user)

    def post(url, body):
        return client.post(url, data=json.dumps(body), content_type="application/json")

    created = post("/push/devices/", {"backend": "fcm", "fid": FID, "platform": "android"})
    again = post("/push/devices/", {"backend": "fcm", "token": "fid:" + FID, "platform": "android"})
    refused = post("/push/devices/", {"backend": "fcm", "fid": "not-an-fid"})

    assert (created.status_code, again.status_code, refused.status_code) == (201, 200, 400)
    assert Device.objects.get().token == "fid:" + FID
    gone = post("/push/devices/unregister/", {"backend": "fcm", "fid": FID})
    assert gone.status_code == 200 and not Device.objects.get().active


@pytest.mark.django_db
def test_topics__an_installation_id_is_the_registration_of_topic_calls(fcm_site, clock):
    user = get_user_model().objects.create_user("fid-topics")
    device = device_register(user=user, backend="fcm", token="fid:" + FID)
    (job,) = topic_subscribe(topic="news", devices=[device])

    assert run_job(JOB_TYPE, job.pk, owner="w1", clock=clock) == "done"

    assert fcm_site.iid.subscribers("news") == {FID}
    assert topic_list(device=device) == ["news"]
    assert {call.registration for call in fcm_site.iid.calls} == {FID}
