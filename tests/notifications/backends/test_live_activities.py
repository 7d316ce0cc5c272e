"""Live Activities on APNs: the option and its dates, the tokens, the wire (against the APNs fake), broadcast
channels and their management, and the services that start, update and end activities."""

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.test import Client

from notifications.backends.apns import APNsBackend
from notifications.backends.apns_channels import ChannelClient, ChannelError
from notifications.backends.base import Outcome, TokenError
from notifications.content import check_options
from notifications.live_activities import (
    live_activity_broadcast,
    live_activity_channel_create,
    live_activity_channel_delete,
    live_activity_channel_list,
    live_activity_end,
    live_activity_start,
    live_activity_update,
)
from notifications.models import Device
from notifications.services import device_register, notification_send_to_user
from notifications.testing.fake_apns import live_token
from notifications.testing.keys import APNS_TOPIC

from .conftest import message, run, send_all

HEX = "ab" * 32
FAR = datetime.max.replace(tzinfo=timezone(timedelta(hours=-23)))  # past 9999-12-31 in UTC
STATE = {"eta": "12:40", "stops": 2}
START = {
    "event": "start",
    "attributes_type": "DeliveryAttributes",
    "attributes": {"order": "1234"},
    "content_state": STATE,
    "input_push_token": True,
}


def live(**fields):
    return check_options({"live_activity": fields})


# --- the option: every field checked, hostile dates refused by name ----------------------------------------


def test_option__dates_become_unix_seconds_and_the_timestamp_defaults_to_now():
    stale = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    checked = live(event="update", activity="order-1234", content_state=STATE, stale_date=stale, relevance_score=50)

    got = checked["live_activity"]
    assert got["stale_date"] == int(stale.timestamp()) and got["relevance_score"] == 50
    assert abs(got["timestamp"] - datetime.now(UTC).timestamp()) < 60
    other_zone = datetime(2026, 12, 6, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    assert (
        live(event="update", content_state={}, stale_date=other_zone)["live_activity"]["stale_date"]
        == got["stale_date"]
    )


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"stale_date": datetime(2026, 1, 1)}, "stale_date must be a timezone-aware datetime"),
        ({"stale_date": 1.5}, "stale_date must be an aware datetime or whole Unix seconds"),
        ({"stale_date": True}, "stale_date must be an aware datetime or whole Unix seconds"),
        ({"stale_date": "2026-01-01"}, "stale_date must be an aware datetime or whole Unix seconds"),
        ({"stale_date": -1}, "stale_date must fall between 1970 and the year 9999"),
        ({"stale_date": 10**30}, "stale_date must fall between 1970 and the year 9999"),
        ({"timestamp": float("nan")}, "timestamp must be an aware datetime"),
        ({"stale_date": datetime(1, 1, 1, tzinfo=UTC)}, "stale_date must fall between 1970"),
        ({"stale_date": FAR}, "stale_date must fall between 1970"),
        ({"dismissal_date": 1}, "dismissal_date goes with event end only"),
        ({"relevance_score": float("inf")}, "relevance_score must be a finite number"),
        ({"relevance_score": -1}, "relevance_score must be a finite number"),
        ({"event": "pause"}, "event must be one of start, update, end"),
        ({"content_state": [1]}, "content_state must be a JSON object"),
        ({"activity": "has space"}, "activity must be 1 to 100"),
        ({"attributes": {}}, "attributes goes with event start only"),
        ({"colour": "red"}, "Unknown live_activity key colour"),
    ],
)
def test_option__hostile_values_are_errors_naming_the_field(fields, words):
    value = {"event": "update", "content_state": STATE, **fields}
    with pytest.raises(ValidationError) as caught:
        check_options({"live_activity": value})
    assert words in caught.value.message_dict["options"][0]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"attributes_type": None}, "attributes_type must be a Swift type name"),
        ({"attributes_type": "Bad Type"}, "attributes_type must be a Swift type name"),
        ({"attributes": None}, "attributes must be a JSON object"),
        ({"input_push_token": 1}, "input_push_token must be true or false"),
        ({"input_push_channel": "not base64!"}, "input_push_channel must be a base64 channel id"),
    ],
)
def test_option__a_start_needs_its_attributes(fields, words):
    with pytest.raises(ValidationError) as caught:
        check_options({"live_activity": {**START, **fields}})
    assert words in caught.value.message_dict["options"][0]


# --- tokens ------------------------------------------------------------------------------------------------


def test_tokens__live_activity_tokens_keep_their_prefix_and_name_and_lower_case_hex():
    assert APNsBackend.canonical_token(f"liveactivity:order-1234:{HEX.upper()}") == f"liveactivity:order-1234:{HEX}"
    start = f"liveactivity-start:DeliveryAttributes:{HEX}"
    assert APNsBackend.canonical_token(start) == start
    for bad in (f"liveactivity::{HEX}", f"liveactivity:a b:{HEX}", f"liveactivity-start:9Type:{HEX}",
                "liveactivity:order:xyz", f"liveactivity-start:{HEX}"):  # fmt: skip
        with pytest.raises(TokenError):
            APNsBackend.canonical_token(bad)


# --- on the wire, against the APNs fake ----------------------------------------------------------------------


def test_wire__a_start_goes_to_a_push_to_start_token_under_the_live_activity_topic(apns, apns_backend):
    token = f"liveactivity-start:DeliveryAttributes:{live_token()}"
    sent = message(token, title="On its way", body="Arriving 12:40", priority="high", options=live(**START))

    (result,) = run(send_all(apns_backend, [sent]))

    assert result.outcome == Outcome.DELIVERED, result.reason
    (delivery,) = apns.deliveries()
    assert delivery.token == token.rsplit(":", 1)[-1]
    headers = delivery.headers
    assert headers["apns-topic"] == f"{APNS_TOPIC}.push-type.liveactivity"
    assert (headers["apns-push-type"], headers["apns-priority"]) == ("liveactivity", "10")
    aps = delivery.message["aps"]
    assert (aps["event"], aps["content-state"], aps["attributes-type"]) == ("start", STATE, "DeliveryAttributes")
    assert aps["attributes"] == {"order": "1234"} and aps["input-push-token"] == 1
    assert aps["alert"] == {"title": "On its way", "body": "Arriving 12:40"} and isinstance(aps["timestamp"], int)


def test_wire__an_update_without_alert_and_an_end_with_its_dismissal(apns, apns_backend):
    token = f"liveactivity:order-1234:{live_token()}"
    dismiss = datetime.now(UTC) + timedelta(minutes=30)
    update = message(token, title="", body="", options=live(event="update", activity="order-1234",
                                                            content_state=STATE, stale_date=dismiss))  # fmt: skip
    ending = live(event="end", activity="order-1234", content_state={"eta": "done"}, dismissal_date=dismiss)
    end = message(token, title="", body="", options=ending)

    results = run(send_all(apns_backend, [update, end]))

    assert [r.outcome for r in results] == [Outcome.DELIVERED, Outcome.DELIVERED], [r.reason for r in results]
    by_event = {d.message["aps"]["event"]: d for d in apns.deliveries()}
    assert "alert" not in by_event["update"].message["aps"]
    assert by_event["update"].message["aps"]["stale-date"] == int(dismiss.timestamp())
    assert by_event["end"].message["aps"]["dismissal-date"] == int(dismiss.timestamp())
    assert by_event["update"].headers["apns-priority"] == "5"


def test_fake__refuses_what_activitykit_would_not_take(apns, apns_backend):
    token = f"liveactivity-start:DeliveryAttributes:{live_token()}"
    no_alert = message(token, title="", body="", options=live(**START))  # a start must alert
    unknown_channel = message(token, title="t", body="b", options=live(**{**START, "input_push_channel": "Zm9v"}))

    results = run(send_all(apns_backend, [no_alert, unknown_channel]))

    assert [r.outcome for r in results] == [Outcome.PERMANENT, Outcome.PERMANENT]
    assert all("BadPayload" in r.reason and not r.token_invalid for r in results)
    refusals = apns.live_refusals
    assert any("must carry an alert" in r for r in refusals) and any("names no channel" in r for r in refusals)
    assert apns.deliveries() == []


def test_fake__an_alert_push_under_the_live_activity_topic_is_refused(apns):
    problem = apns.live.device_problem(
        {"apns-push-type": "alert", "apns-topic": f"{apns.topic}.push-type.liveactivity"}, {"alert": "x"}
    )
    assert problem == "TopicDisallowed"
    wrong = apns.live.device_problem({"apns-push-type": "liveactivity", "apns-topic": apns.topic}, {})
    assert wrong == "TopicDisallowed"
    priority = apns.live.device_problem(
        {"apns-push-type": "liveactivity", "apns-topic": f"{apns.topic}.push-type.liveactivity", "apns-priority": "1"},
        {},
    )
    assert priority == "BadPriority"


# --- broadcast channels --------------------------------------------------------------------------------------


@pytest.fixture
def channels(apns, apns_options, keys):
    from notifications.backends.apns import _provider_token

    options = {**apns_options, "manage_host": apns.host_port}
    from notifications.backends.credentials import tls_context

    return ChannelClient(bundle=apns.topic, host=apns.host_port, provider_token=_provider_token(options),
                         verify=tls_context(str(keys.ca_file)))  # fmt: skip


def test_channels__create_read_list_and_delete(apns, channels):
    scores = channels.create(stored=False)
    flights = channels.create(stored=True)

    assert channels.read(scores) == {"message-storage-policy": 0, "push-type": "LiveActivity"}
    assert channels.read(flights)["message-storage-policy"] == 1
    assert sorted(channels.channels()) == sorted([scores, flights])
    channels.delete(scores)
    assert channels.channels() == [flights]
    with pytest.raises(ChannelError) as caught:
        channels.read(scores)
    assert caught.value.reason == "ChannelNotRegistered" and not caught.value.temporary


def test_channels__the_limit_and_a_bad_id_are_refusals_with_apples_reason(apns, channels):
    apns.live.max_channels = 1
    channels.create()
    with pytest.raises(ChannelError) as caught:
        channels.create()
    assert caught.value.reason == "CannotCreateChannelConfig" and "10,000 channels" in str(caught.value)
    with pytest.raises(ChannelError, match="base64"):
        channels.delete("not base64!")
    apns.live.max_channels = 10_000


def test_broadcast__one_send_reaches_the_channel_and_a_deleted_channel_fails_the_row(apns, apns_backend, channels):
    channel = channels.create(stored=False)
    update = message(f"channel:{channel}", title="", body="", options=live(event="update", content_state={"s": "2-1"}))

    (sent,) = run(send_all(apns_backend, [update]))

    assert sent.outcome == Outcome.DELIVERED, sent.reason
    (delivery,) = apns.deliveries()
    assert delivery.token == f"channel:{channel}"
    assert delivery.headers["apns-channel-id"] == channel and delivery.headers["apns-expiration"] == "0"
    assert "apns-topic" not in delivery.headers and delivery.headers["apns-push-type"] == "liveactivity"
    channels.delete(channel)
    (gone,) = run(send_all(apns_backend, [update]))
    assert gone.outcome == Outcome.PERMANENT and not gone.token_invalid and "ChannelNotRegistered" in gone.reason


def test_broadcast__an_expiry_on_a_channel_that_stores_nothing_is_refused(apns, apns_backend, channels):
    channel = channels.create(stored=False)
    expires = datetime.now(UTC) + timedelta(minutes=5)
    sent = message(f"channel:{channel}", title="", body="", expires_at=expires,
                   options=live(event="update", content_state={}))  # fmt: skip

    (result,) = run(send_all(apns_backend, [sent]))

    assert result.outcome == Outcome.PERMANENT and "BadExpirationDate" in result.reason


# --- the services ----------------------------------------------------------------------------------------------


@pytest.fixture
def site(settings, apns, apns_options):
    settings.WEAVE = {
        "PUSH_BACKENDS": {
            "apns": {
                "BACKEND": "notifications.backends.apns.APNsBackend",
                "OPTIONS": {**apns_options, "manage_host": apns.host_port},
            }
        },
        "PUSH_TIMEOUT": 5.0,
    }
    cache.clear()


@pytest.fixture
def rider(site):
    user = get_user_model().objects.create_user("rider", password="pw")
    phone = device_register(user=user, backend="apns", token=live_token(), platform="ios")
    start = device_register(user=user, backend="apns", token=f"liveactivity-start:DeliveryAttributes:{live_token()}")
    mine = device_register(user=user, backend="apns", token=f"liveactivity:order-1:{live_token()}")
    other = device_register(user=user, backend="apns", token=f"liveactivity:order-2:{live_token()}")
    return user, {"phone": phone, "start": start, "order-1": mine, "order-2": other}


@pytest.mark.django_db
def test_services__each_message_goes_only_to_the_tokens_it_is_for(rider):
    user, devices = rider

    started = live_activity_start(user=user, attributes_type="DeliveryAttributes", attributes={"order": "1"},
                                  content_state=STATE, title="On its way")  # fmt: skip
    updated = live_activity_update(user=user, activity="order-1", content_state={"eta": "12:55"})
    ended = live_activity_end(user=user, activity="order-1", content_state={"eta": "done"},
                              dismissal_date=datetime.now(UTC))  # fmt: skip
    alert = notification_send_to_user(user=user, title="Receipt", body="Thanks")

    assert [n.device_id for n in started] == [devices["start"].pk]
    assert [n.device_id for n in updated] == [devices["order-1"].pk]
    assert [n.device_id for n in ended] == [devices["order-1"].pk]
    assert ended[0].options["live_activity"]["dismissal_date"] <= int(datetime.now(UTC).timestamp())
    assert [n.device_id for n in alert] == [devices["phone"].pk]
    assert {s.device_id for s in alert.skipped} == {devices[k].pk for k in ("start", "order-1", "order-2")}
    assert all("Live Activity" in s.reason for s in alert.skipped)


@pytest.mark.django_db
def test_services__bad_input_is_refused_and_nothing_is_stored(rider):
    user, _ = rider
    with pytest.raises(ValidationError) as caught:
        live_activity_update(user=user, activity="order-1", content_state={}, stale_date=datetime(2026, 1, 1))
    assert "stale_date" in str(caught.value)
    with pytest.raises(ValidationError):
        live_activity_start(user=user, attributes_type="DeliveryAttributes", attributes={}, content_state={}, title="")
    with pytest.raises(ValidationError) as caught:
        device_register(user=user, backend="apns", token="channel:Zm9v")
    assert "broadcast channel" in str(caught.value)
    from notifications.models import Notification

    assert not Notification.objects.exists()


@pytest.mark.django_db
def test_services__channels_are_managed_and_a_broadcast_is_one_notification(site, apns):
    channel = live_activity_channel_create(backend="apns")
    assert live_activity_channel_list(backend="apns") == [channel]

    row = live_activity_broadcast(backend="apns", channel=channel, event="update", content_state={"s": "1-0"})

    assert row.device_token == f"channel:{channel}" and row.device_id is None
    with pytest.raises(ValidationError):
        live_activity_broadcast(backend="apns", channel=channel, event="start", content_state={})
    live_activity_channel_delete(backend="apns", channel=channel)
    assert live_activity_channel_list(backend="apns") == []
    with pytest.raises(ValidationError):
        live_activity_channel_list(backend="nope")


@pytest.mark.django_db
def test_endpoint__an_app_registers_its_live_activity_tokens(site):
    user = get_user_model().objects.create_user("app", password="pw")
    client = Client()
    client.force_login(user)
    hex_token = live_token()

    def post(body):
        return client.post("/push/devices/", data=json.dumps(body), content_type="application/json")

    start = post({"backend": "apns", "platform": "ios", "token": f"liveactivity-start:DeliveryAttributes:{hex_token}"})
    update = post({"backend": "apns", "platform": "ios", "token": f"liveactivity:order-9:{hex_token.upper()}"})
    channel = post({"backend": "apns", "platform": "ios", "token": "channel:Zm9v"})

    assert (start.status_code, update.status_code, channel.status_code) == (201, 201, 400)
    assert set(Device.objects.values_list("token", flat=True)) == {
        f"liveactivity-start:DeliveryAttributes:{hex_token}",
        f"liveactivity:order-9:{hex_token}",
    }


# --- through the worker ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_worker__starts_updates_ends_and_broadcasts_and_prunes_an_ended_activitys_token(rider, apns):
    from notifications.delivery import deliver_batch
    from notifications.models import Notification

    user, devices = rider
    channel = live_activity_channel_create(backend="apns")
    rows = [
        *live_activity_start(user=user, attributes_type="DeliveryAttributes", attributes={"order": "1"},
                             content_state=STATE, title="On its way"),
        *live_activity_update(user=user, activity="order-1", content_state={"eta": "12:55"}),
        live_activity_broadcast(backend="apns", channel=channel, event="update", content_state={"s": "1-0"}),
    ]  # fmt: skip
    apns.unregister(devices["order-2"].token.rsplit(":", 1)[-1])  # that activity ended on the phone
    rows += live_activity_update(user=user, activity="order-2", content_state={})

    report = deliver_batch(owner="worker-a")

    assert (report.delivered, report.failed, report.pruned) == (3, 1, 1)
    statuses = dict(Notification.objects.filter(pk__in=[r.pk for r in rows]).values_list("pk", "status"))
    assert [statuses[r.pk] for r in rows] == ["delivered", "delivered", "delivered", "failed"]
    assert not Device.objects.get(pk=devices["order-2"].pk).active
    events = sorted((d.token.startswith("channel:"), d.message["aps"]["event"]) for d in apns.deliveries())
    assert events == [(False, "start"), (False, "update"), (True, "update")]
