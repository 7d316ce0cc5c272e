"""The newer FCM message options: analytics labels, Android's delivery switches and notification proxy."""

import pytest
from django.core.exceptions import ValidationError

from notifications.backends.base import Outcome, PushMessage
from notifications.backends.fcm import fcm_message
from notifications.content import apns_aps, check_options
from tests.notifications.backends.conftest import message, run, send_all

TOKEN = "fcm-token-" + "a" * 40
ALL = {
    "analytics_label": "spring-sale_2026.v1~%20",
    "android": {
        "direct_boot_ok": True,
        "bandwidth_constrained_ok": False,
        "restricted_satellite_ok": True,
        "proxy": "IF_PRIORITY_LOWERED",
        "analytics_label": "android-label",
        "channel_id": "orders",
    },
    "apns": {"analytics_label": "ios-label"},
}


def test_check__the_new_options_are_kept_as_given():
    assert check_options(ALL) == ALL


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"analytics_label": ""}, "analytics_label must be 1 to 50"),
        ({"analytics_label": "x" * 51}, "analytics_label must be 1 to 50"),
        ({"analytics_label": "has space"}, "analytics_label must be 1 to 50"),
        ({"analytics_label": "caf\u00e9"}, "analytics_label must be 1 to 50"),
        ({"analytics_label": 7}, "analytics_label must be 1 to 50"),
        ({"android": {"analytics_label": "a/b"}}, "android.analytics_label"),
        ({"apns": {"analytics_label": "a\nb"}}, "apns.analytics_label"),
        ({"android": {"proxy": "allow"}}, "android.proxy must be one of ALLOW, DENY, IF_PRIORITY_LOWERED"),
        ({"android": {"direct_boot_ok": "true"}}, "android.direct_boot_ok must be true or false"),
        ({"android": {"bandwidth_constrained_ok": 1}}, "android.bandwidth_constrained_ok must be true or false"),
        ({"android": {"restricted_satellite_ok": None}}, "android.restricted_satellite_ok must be true or false"),
        ({"webpush": {"analytics_label": "x"}}, "Unknown option webpush.analytics_label"),
    ],
)
def test_check__a_bad_value_is_refused_naming_the_option(options, words):
    with pytest.raises(ValidationError) as caught:
        check_options(options)
    assert words in caught.value.message_dict["options"][0]


def test_wire__each_option_goes_where_the_v1_api_takes_it():
    body = fcm_message(message(TOKEN, options=ALL), None)["message"]

    assert body["fcm_options"] == {"analytics_label": "spring-sale_2026.v1~%20"}
    android = body["android"]
    assert (android["direct_boot_ok"], android["bandwidth_constrained_ok"], android["restricted_satellite_ok"]) == (
        True,
        False,
        True,
    )
    assert android["fcm_options"] == {"analytics_label": "android-label"}
    assert android["notification"]["proxy"] == "IF_PRIORITY_LOWERED"
    assert android["notification"]["channel_id"] == "orders"
    assert not {"direct_boot_ok", "analytics_label", "restricted_satellite_ok"} & set(android["notification"])
    assert body["apns"]["fcm_options"] == {"analytics_label": "ios-label"}
    assert "analytics_label" not in body["apns"]["payload"]["aps"]


def test_wire__no_option_no_field():
    body = fcm_message(message(TOKEN), None)["message"]

    assert "fcm_options" not in body and "fcm_options" not in body["apns"] and "fcm_options" not in body["android"]
    assert "direct_boot_ok" not in body["android"]


def test_wire__a_direct_apns_payload_has_no_analytics_label():
    assert "analytics_label" not in apns_aps(title="t", body="b", options={"apns": {"analytics_label": "x"}})


def test_fake__accepts_the_options_and_refuses_a_label_fcm_would_refuse(fcm, fcm_backend):
    bad = {"android": {"analytics_label": "no spaces allowed"}}  # past check_options, as an older row could be
    good, refused = run(
        send_all(fcm_backend, [message(TOKEN, options=ALL), PushMessage("k", TOKEN, "t", "b", options=bad)])
    )

    assert good.outcome == Outcome.DELIVERED
    (delivery,) = fcm.deliveries()
    assert delivery.message["android"]["restricted_satellite_ok"] is True
    assert refused.outcome == Outcome.PERMANENT and not refused.token_invalid
    assert "analytics_label" in refused.reason
