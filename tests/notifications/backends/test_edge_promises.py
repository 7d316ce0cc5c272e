"""What the edge promises on the HTTP/2 backends (FCM, APNs, Web Push), against the real fakes made hostile.

Each fake keeps checking the protocol as it always does; a thin ASGI layer in front of it (`Hostile`)
records what each request carried and can make the answer hostile:

- `cookie`: the fake's own answer plus a `Set-Cookie`; the push client keeps no cookies, so the next
  request must not carry a `Cookie` header;
- `huge`: a 503 with a body of many times the cap instead; the body is read only up to the cap and the
  reason says it was cut.

The Web Push test reads the recorded ciphertexts (RFC 8188 header: salt 16 bytes, record size 4,
key id length 1, key id = the sender's ephemeral public key) and shows a fresh salt and ephemeral key
on every send, as RFC 8291 requires.
"""

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from notifications.backends.apns import APNsBackend
from notifications.backends.base import Outcome
from notifications.backends.fcm import FCMBackend
from notifications.backends.webpush import WebPushBackend
from notifications.testing.fake_apns import FakeAPNs
from notifications.testing.fake_fcm import FakeFCM
from notifications.testing.fake_webpush import FakeWebPush
from notifications.testing.keys import APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC, FCM_PROJECT_ID, TestKeys, b64url_decode

from .conftest import TIMEOUT, message

HUGE_BYTES = 4 * 1024 * 1024  # 64 times the body cap
CHUNK = 64 * 1024


@dataclass
class Seen:
    """One request as it reached the fake: path, lower-cased headers, and the body as it arrived."""

    path: str
    headers: dict[str, str]
    body: bytearray = field(default_factory=bytearray)


class Hostile:
    """ASGI middleware in front of a fake's app: records requests and makes answers hostile on demand.

    OAuth token requests (`/token`) always pass untouched: they are google-auth's, not the push client's.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.mode = ""
        self.seen: list[Seen] = []
        self.body_bytes_sent = 0

    def reset(self, mode: str = "") -> None:
        self.mode = mode
        self.seen = []
        self.body_bytes_sent = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] == "/token":
            await self.inner(scope, receive, send)
            return
        seen = Seen(scope["path"], {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]})
        self.seen.append(seen)

        async def recording_receive():
            received = await receive()
            if received["type"] == "http.request":
                seen.body.extend(received.get("body", b""))
            return received

        if self.mode == "huge":
            await self._huge(recording_receive, send)
            return

        async def cookie_send(sent):
            if sent["type"] == "http.response.start" and self.mode == "cookie":
                planted = [(b"set-cookie", b"planted=from-the-provider; Path=/"), (b"set-cookie", b"second=1")]
                sent = {**sent, "headers": [*sent["headers"], *planted]}
            await send(sent)

        await self.inner(scope, recording_receive, cookie_send)

    async def _huge(self, receive, send) -> None:
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(HUGE_BYTES).encode())]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        filler = b"x" * CHUNK
        try:
            for _ in range(HUGE_BYTES // CHUNK):
                await send({"type": "http.response.body", "body": filler, "more_body": True})
                self.body_bytes_sent += CHUNK
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except Exception:  # noqa: BLE001  the client reset the stream once it had read its cap
            return


def _make_hostile(fake) -> Hostile:
    # The fakes serve one ASGI app with Hypercorn; wrapping it before the server starts keeps the fake's
    # own URL (VAPID's audience, APNs' authority) and its protocol checks unchanged.
    server = fake.server
    hostile = Hostile(server._app)
    server._app = hostile
    return hostile


@pytest.fixture(scope="module")
def own_keys(tmp_path_factory) -> TestKeys:
    return TestKeys.create(tmp_path_factory.mktemp("edge-promise-keys"))


@pytest.fixture(scope="module")
def hostile_fcm(own_keys):
    fake = FakeFCM(own_keys)
    hostile = _make_hostile(fake)
    with fake:
        own_keys.set_token_uri(fake.token_uri)
        yield fake, hostile


@pytest.fixture(scope="module")
def hostile_apns(own_keys):
    fake = FakeAPNs(own_keys)
    hostile = _make_hostile(fake)
    with fake:
        yield fake, hostile


@pytest.fixture(scope="module")
def hostile_webpush(own_keys):
    fake = FakeWebPush(own_keys)
    hostile = _make_hostile(fake)
    with fake:
        yield fake, hostile


def _fcm(fake, keys):
    options = {"project_id": FCM_PROJECT_ID, "credentials_file": str(keys.fcm_service_account),
               "base_url": fake.url, "ca_file": str(keys.ca_file)}  # fmt: skip
    return FCMBackend(alias="fcm", options=options, timeout=TIMEOUT, concurrency=4), "fcm-" + "a" * 30


def _apns(fake, keys):
    options = {"team_id": APNS_TEAM_ID, "key_id": APNS_KEY_ID, "key_file": str(keys.apns_key_file),
               "topic": APNS_TOPIC, "host": fake.host_port, "ca_file": str(keys.ca_file)}  # fmt: skip
    return APNsBackend(alias="apns", options=options, timeout=TIMEOUT, concurrency=4), "ab" * 32


def _webpush(fake, keys):
    options = {"vapid_private_key_file": str(keys.vapid_private_key_file),
               "vapid_subject": "mailto:ops@example.com", "ca_file": str(keys.ca_file)}  # fmt: skip
    backend = WebPushBackend(alias="webpush", options=options, timeout=TIMEOUT, concurrency=4)
    return backend, fake.subscription("edge-promises").as_token()


BACKENDS = {"fcm": _fcm, "apns": _apns, "webpush": _webpush}


@pytest.fixture(params=sorted(BACKENDS))
def provider(request, own_keys):
    fake, hostile = request.getfixturevalue(f"hostile_{request.param}")
    fake.reset()
    hostile.reset()
    backend, token = BACKENDS[request.param](fake, own_keys)
    return request.param, fake, hostile, backend, token


def _send_in_turn(backend, messages):
    async def go():
        try:
            return [await backend.send(m) for m in messages]  # one after the other, on one client
        finally:
            await backend.aclose()

    return asyncio.run(go())


def test_http2_backends__keep_no_cookies_a_provider_sets(provider):
    name, fake, hostile, backend, token = provider
    hostile.reset("cookie")

    results = _send_in_turn(backend, [message(token) for _ in range(3)])

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 3, [r.reason for r in results]
    assert len(hostile.seen) == 3 and fake.stats()["delivered"] == 3
    # Every answer planted cookies; no later request gave one back.
    assert [s.headers.get("cookie") for s in hostile.seen] == [None, None, None]


def test_http2_backends__an_oversized_body_is_read_only_up_to_the_cap(provider):
    name, fake, hostile, backend, token = provider
    hostile.reset("huge")

    (result,) = _send_in_turn(backend, [message(token)])

    assert (result.outcome, result.http_status, result.systemic) == (Outcome.TEMPORARY, 503, True)
    assert re.search(r"body cut at \d+ bytes", result.reason), result.reason
    assert len(result.reason) < 2000  # a snippet, not the body
    assert len(hostile.seen) == 1


def _aes128gcm_header(body: bytes) -> tuple[bytes, int, bytes]:
    """RFC 8188 section 2.1: salt (16), record size (4, big-endian), key id length (1), key id."""
    salt, record_size, id_length = body[:16], int.from_bytes(body[16:20], "big"), body[20]
    return salt, record_size, bytes(body[21 : 21 + id_length])


def test_webpush__every_send_has_a_fresh_salt_and_ephemeral_key(hostile_webpush, own_keys):
    fake, hostile = hostile_webpush
    fake.reset()
    hostile.reset()
    backend, token = _webpush(fake, own_keys)
    subscriber_key = b64url_decode(fake.subscription("edge-promises").p256dh)
    sent = message(token, data={"n": 1})

    results = _send_in_turn(backend, [sent] * 4)  # the same message four times: a resend must not repeat keys

    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 4
    headers = [_aes128gcm_header(bytes(seen.body)) for seen in hostile.seen]
    assert len(headers) == 4
    salts = [salt for salt, _, _ in headers]
    key_ids = [key_id for _, _, key_id in headers]
    assert all(len(salt) == 16 for salt in salts)
    assert all(record_size >= 18 for _, record_size, _ in headers)  # RFC 8188: rs is at least 18
    for key_id in key_ids:
        # RFC 8291 section 4: the key id is the sender's ephemeral P-256 public key, uncompressed (65 bytes).
        assert len(key_id) == 65 and key_id[0] == 4
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key_id)
        assert key_id != subscriber_key
    assert len(set(salts)) == 4, "a salt was reused"
    assert len(set(key_ids)) == 4, "an ephemeral key was reused"
    assert len({bytes(seen.body) for seen in hostile.seen}) == 4
    # And each still decrypts, at the fake, to the same message.
    assert [d.message for d in fake.deliveries()] == [fake.deliveries()[0].message] * 4
    assert fake.deliveries()[0].message["data"] == {"n": 1}
