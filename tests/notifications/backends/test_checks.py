"""The system check reads WEAVE["PUSH_BACKENDS"]: unknown backends, missing options, unreadable key files."""

import os

import pytest

from notifications.checks import check_provider_url


def errors_for(settings, backends):
    settings.WEAVE = {"PUSH_URL": "https://push.example/send", "PUSH_BACKENDS": backends}
    return [error.msg for error in check_provider_url()]


def test_check__a_complete_configuration_passes(settings, fcm_options, apns_options, webpush_options):
    backends = {
        "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options},
        "apns": {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": apns_options},
        "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend", "OPTIONS": webpush_options},
    }
    assert errors_for(settings, backends) == []


def test_check__names_an_unknown_backend_path(settings):
    (message,) = errors_for(settings, {"x": {"BACKEND": "notifications.backends.nope.Backend", "OPTIONS": {}}})
    assert "'x'" in message and "Cannot import push backend 'notifications.backends.nope.Backend'" in message


@pytest.mark.parametrize(
    ("path", "missing"),
    [
        ("notifications.backends.fcm.FCMBackend", ["project_id", "credentials_file"]),
        ("notifications.backends.apns.APNsBackend", ["team_id", "key_id", "key_file", "topic"]),
        ("notifications.backends.webpush.WebPushBackend", ["vapid_private_key_file", "vapid_subject"]),
    ],
)
def test_check__names_every_missing_option(settings, path, missing):
    messages = errors_for(settings, {"b": {"BACKEND": path, "OPTIONS": {}}})
    assert [m.split(": ", 1)[1] for m in messages] == [f"OPTIONS[{name!r}] is required." for name in missing]


def test_check__names_unreadable_and_missing_key_files(settings, apns_options, tmp_path):
    locked = tmp_path / "locked.p8"
    locked.write_text("secret")
    os.chmod(locked, 0)
    backends = {
        "gone": {"BACKEND": "notifications.backends.apns.APNsBackend",
                 "OPTIONS": {**apns_options, "key_file": str(tmp_path / "missing.p8")}},
        "junk": {"BACKEND": "notifications.backends.apns.APNsBackend",
                 "OPTIONS": {**apns_options, "key_file": str(tmp_path)}},
    }  # fmt: skip
    messages = errors_for(settings, backends)
    assert any("'gone'" in m and "missing.p8' is not a file" in m for m in messages)
    assert any("'junk'" in m and "is not a file" in m for m in messages)
    if os.geteuid() != 0:  # root reads anything: the permission case only shows for other users
        messages = errors_for(settings, {"x": {"BACKEND": "notifications.backends.apns.APNsBackend",
                                               "OPTIONS": {**apns_options, "key_file": str(locked)}}})  # fmt: skip
        assert any("not readable" in m for m in messages)


def test_check__a_key_file_that_is_not_a_key_is_refused(settings, apns_options, fcm_options, tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("not a key")
    backends = {
        "apns": {"BACKEND": "notifications.backends.apns.APNsBackend",
                 "OPTIONS": {**apns_options, "key_file": str(junk)}},
        "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend",
                "OPTIONS": {**fcm_options, "credentials_file": str(junk)}},
    }  # fmt: skip
    messages = errors_for(settings, backends)
    assert any("'apns'" in m and "not a PEM private key" in m for m in messages)
    assert any("'fcm'" in m and "not a JSON service-account file" in m for m in messages)


def test_check__a_typo_in_an_option_name_is_reported(settings, webpush_options):
    options = {**webpush_options, "vapid_subjet": "mailto:x@example.com"}
    (message,) = errors_for(settings, {"w": {"BACKEND": "notifications.backends.webpush.WebPushBackend",
                                             "OPTIONS": options}})  # fmt: skip
    assert "Unknown OPTIONS 'vapid_subjet'" in message
