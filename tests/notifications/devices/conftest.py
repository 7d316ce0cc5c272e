"""Fixtures for the device tests: backends configured for validation, users, and browser subscriptions."""

import base64
import json
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.contrib.auth import get_user_model

# The Web Push fake and its keys, shared with the backend tests.
from tests.notifications.backends.conftest import (  # noqa: F401
    _fresh_credentials,
    keys,
    webpush,
    webpush_options,
    webpush_server,
)

FCM_ENDPOINT = "https://fcm.googleapis.com/fcm/send/dGVzdA:APA91bHPRgkF3JUikC4ENAHEeMrd41Zxv3hVZjC9KtT8OvPVGJ-hQMRKRrZuJAEcl7B338qju59zJMjw2DELjzEvxwYv7hH5Ynpc1ODQ0aT4U4OFEeco8ohsN5PjL1iC2dNtk2BAokeMCg2ZXKqpc8FXKmhX94kIxQ"
BACKENDS = {
    "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {}},
    "apns": {"BACKEND": "notifications.backends.apns.APNsBackend", "OPTIONS": {}},
    "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend", "OPTIONS": {}},
}


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def subscription(endpoint: str = FCM_ENDPOINT, *, indent: int | None = None, **overrides) -> str:
    """A browser's subscription JSON for `endpoint`, as PushSubscription.toJSON() gives it."""
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    pair = {"p256dh": b64url(point), "auth": b64url(os.urandom(16))}
    pair.update(overrides.pop("keys", {}))
    return json.dumps({"endpoint": endpoint, "expirationTime": None, "keys": pair, **overrides}, indent=indent)


@pytest.fixture
def backends(settings):
    """Backends for validation only (no request is made), with the destination policy at its defaults."""
    settings.WEAVE = {"PUSH_URL": "https://push.example/send", "PUSH_BACKENDS": BACKENDS}


@pytest.fixture
def user():
    return get_user_model().objects.create_user("alice")


@pytest.fixture
def bob():
    return get_user_model().objects.create_user("bob")
