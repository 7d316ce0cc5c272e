"""The Web Push destination policy: what device_register accepts as an endpoint, and where a send may connect.

Every request stays on 127.0.0.1: hostile names are "resolved" by a stand-in resolver, and the only
server is the local Web Push fake.
"""

import asyncio
import ipaddress
import json

import httpcore
import pytest
from django.core.exceptions import ValidationError

from notifications.backends.base import Outcome
from notifications.backends.credentials import VapidSigner
from notifications.backends.destinations import (
    ConnectRefused,
    GuardedNetworkBackend,
    GuardedTransport,
    address_problem,
    check_endpoint,
)
from notifications.backends.http import PushClient
from notifications.backends.webpush import WebPushBackend
from notifications.models import Device
from notifications.services import device_register
from tests.notifications.backends.conftest import message

from .conftest import FCM_ENDPOINT, subscription

pytestmark = pytest.mark.django_db

HOSTILE_ENDPOINTS = [
    "http://fcm.googleapis.com/fcm/send/x",  # not https
    "http://127.0.0.1:5432/internal/reset?all=1",
    "https://127.0.0.1:5432/x",
    "https://169.254.169.254/latest/meta-data/",
    "https://10.0.0.7/x",
    "https://[::1]/x",
    "https://[::ffff:127.0.0.1]/x",
    "https://localhost/x",
    "https://localhost:8443/x",
    "https://0x7f000001/x",
    "https://2130706433/x",
    "https://0177.0.0.1/x",
    "https://127.1/x",
    "https://user:pass@fcm.googleapis.com/fcm/send/x",
    "https://fcm.googleapis.com@127.0.0.1/x",
    "https://fcm.googleapis.com\\@127.0.0.1/x",
    "https://fcm.googleapis.com:8443/fcm/send/x",  # push services listen on 443
    "https://fcm.googleapis.com./fcm/send/x",
    "https://fcm.googleapis.com/fcm/send/x#frag",
    "https://fcm.googleapis.com/fcm send/x",
    "https://evil.example.com/x",  # a public name, but no known push service
    "https://fcm.googleapis.com.evil.com/x",
    "https://push.apple.com/x",  # *.push.apple.com means a name below it
    "https://metadata.google.internal/computeMetadata/v1/",
]


@pytest.mark.parametrize("endpoint", HOSTILE_ENDPOINTS)
def test_register__a_webpush_endpoint_outside_the_policy_is_refused(backends, user, settings, endpoint):
    with pytest.raises(ValidationError) as caught:
        device_register(user=user, backend="webpush", token=subscription(endpoint))

    assert set(caught.value.message_dict) == {"token"}
    assert Device.objects.count() == 0


@pytest.mark.parametrize(
    "endpoint",
    [
        FCM_ENDPOINT,
        "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABh",
        "https://web.push.apple.com/QGuQyavXutnMH4dCSdRlmt0V",
        "https://wns2-par02p.notify.windows.com/w/?token=BQYAAADe%2b",
        "HTTPS://FCM.googleapis.com/fcm/send/Abc",  # scheme and host are case-insensitive: stored lower-case
    ],
)
def test_register__the_known_push_services_are_accepted_and_stored_canonical(backends, user, endpoint):
    given = subscription(endpoint)
    device = device_register(user=user, backend="webpush", token=given)
    stored = json.loads(device.token)
    assert (
        stored["endpoint"].startswith("https://") and stored["endpoint"].split("/")[2] == endpoint.split("/")[2].lower()
    )
    # Compact, the keys in a fixed order, nothing but endpoint and keys.
    assert device.token == json.dumps(
        {"endpoint": stored["endpoint"], "keys": json.loads(given)["keys"]}, separators=(",", ":")
    )


def test_register__the_host_list_can_be_extended_or_replaced(backends, user, settings):
    own = "https://push.example.org/sub/1"
    with pytest.raises(ValidationError):
        device_register(user=user, backend="webpush", token=subscription(own))

    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_EXTRA_HOSTS": ["push.example.org"]}
    device_register(user=user, backend="webpush", token=subscription(own))
    device_register(user=user, backend="webpush", token=subscription())  # the known ones stay

    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_HOSTS": ["*.example.org"], "PUSH_WEBPUSH_EXTRA_HOSTS": []}
    device_register(user=user, backend="webpush", token=subscription("https://a.example.org/x"))
    with pytest.raises(ValidationError):
        device_register(user=user, backend="webpush", token=subscription())  # FCM is no longer on the list


def test_register__loopback_needs_the_unsafe_opt_in(backends, user, settings):
    local = subscription("https://127.0.0.1:8443/wp/x")
    with pytest.raises(ValidationError):
        device_register(user=user, backend="webpush", token=local)

    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True}
    device_register(user=user, backend="webpush", token=local)
    # The opt-in opens loopback only, and never plain http or odd spellings of it.
    for other in ("https://10.0.0.1/x", "http://127.0.0.1:8443/x", "https://0x7f000001/x", "https://169.254.169.254/"):
        with pytest.raises(ValidationError):
            device_register(user=user, backend="webpush", token=subscription(other))


REFUSED = [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
    "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
    "::127.0.0.1", "2002:7f00:1::1", "2002:a00:1::1", "64:ff9b::a00:1", "64:ff9b::7f00:1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:db8::1", "fec0::1",
    # Global to Python 3.13's ipaddress, not to 3.12.1's (ORCHIDv2, 192.0.0.9): refused on every version.
    "2001:20::1", "192.0.0.9", "100::1", "5f00::1", "3fff::1",
]  # fmt: skip
# 6to4 carrying a public IPv4 address is private to Python 3.13's ipaddress: it passes on every version.
PUBLIC = [
    "142.250.74.110",
    "2a00:1450:4007:80e::200a",
    "2002:8efa:4a6e::1",
    "::ffff:142.250.74.110",
    "64:ff9b::8efa:4a6e",
]


@pytest.mark.parametrize("address", REFUSED)
def test_address__private_loopback_link_local_multicast_reserved_and_embedded_ones_are_refused(address):
    assert address_problem(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_address__public_ones_pass(address):
    assert address_problem(ipaddress.ip_address(address)) == ""


def test_address__the_policy_is_weaves_own_lists_never_pythons_version_dependent_flags(monkeypatch):
    def asked(self):
        raise AssertionError("the destination policy asked the ipaddress module's own classification")

    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for flag in ("is_global", "is_private", "is_reserved", "is_multicast", "is_loopback", "is_link_local"):
            monkeypatch.setattr(cls, flag, property(asked))

    assert all(address_problem(ipaddress.ip_address(a)) for a in REFUSED)
    assert not any(address_problem(ipaddress.ip_address(a)) for a in PUBLIC)


class _Recording(httpcore.AsyncNetworkBackend):
    """An inner network backend that records where it was asked to connect, and connects nowhere."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.calls.append((host, port))
        raise httpcore.ConnectError("recorded, not connected")


def _resolver(*answers):
    calls = []

    async def resolve(host, port):
        calls.append(host)
        return list(answers[min(len(calls), len(answers)) - 1])

    resolve.calls = calls
    return resolve


@pytest.mark.parametrize(
    "addresses",
    [["127.0.0.1"], ["10.0.0.5"], ["142.250.74.110", "192.168.0.9"], ["::ffff:169.254.169.254"], ["fd00::1"]],
)
def test_connect__a_known_name_resolving_to_a_refused_address_is_never_connected(backends, addresses):
    inner = _Recording()
    guard = GuardedNetworkBackend(inner=inner, resolve=_resolver(addresses))

    with pytest.raises(ConnectRefused, match="destination policy"):
        asyncio.run(guard.connect_tcp("fcm.googleapis.com", 443))

    assert inner.calls == []


def test_connect__goes_to_the_address_it_checked_not_to_the_name(backends):
    inner = _Recording()
    # A rebinding resolver: public first, loopback on any later question.
    resolve = _resolver(["142.250.74.110"], ["127.0.0.1"])
    guard = GuardedNetworkBackend(inner=inner, resolve=resolve)

    with pytest.raises(httpcore.ConnectError):
        asyncio.run(guard.connect_tcp("fcm.googleapis.com", 443))

    assert inner.calls == [("142.250.74.110", 443)] and resolve.calls == ["fcm.googleapis.com"]


def test_connect__a_name_off_the_list_is_refused_before_any_lookup(backends):
    resolve = _resolver(["142.250.74.110"])
    guard = GuardedNetworkBackend(inner=_Recording(), resolve=resolve)
    with pytest.raises(ConnectRefused):
        asyncio.run(guard.connect_tcp("evil.example.com", 443))
    assert resolve.calls == []


def _send_once(backend, token):
    """One send of a message to `token` on a backend of its own, closed afterwards."""

    async def go():
        try:
            return await backend.send(message(token))
        finally:
            await backend.aclose()

    return asyncio.run(go())


def _guarded_backend(webpush_options, resolve):
    from notifications.backends.credentials import tls_context

    backend = WebPushBackend(alias="webpush", options=webpush_options, timeout=5, concurrency=2)
    transport = GuardedTransport(verify=tls_context(webpush_options["ca_file"]), max_connections=2, resolve=resolve)
    backend._client = PushClient(transport=transport, follow_redirects=False)
    return backend


def test_send__a_listed_name_rebound_to_loopback_sends_nothing_and_spares_the_batch(settings, webpush, webpush_options):
    # The fake listens on 127.0.0.1; "fcm.googleapis.com" is made to resolve there (a rebinding attack).
    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": False}
    sub = webpush.subscription("victim")
    token = json.dumps({"endpoint": FCM_ENDPOINT, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}})
    backend = _guarded_backend(webpush_options, _resolver(["127.0.0.1"]))

    result = _send_once(backend, token)

    assert result.outcome == Outcome.TEMPORARY and not result.systemic and not result.fatal
    assert "destination policy" in result.reason and "nothing was sent" in result.reason
    assert webpush.stats()["requests"] == 0


def test_send__the_opt_in_connects_to_loopback_and_keeps_no_answer_verbatim(settings, webpush, webpush_options):
    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True}
    sub = webpush.subscription("alice")
    token = sub.as_token()
    resolve = _resolver(["127.0.0.1"])
    backend = _guarded_backend(webpush_options, resolve)

    result = _send_once(backend, token)

    assert (result.outcome, result.http_status) == (Outcome.DELIVERED, 201)
    assert resolve.calls == ["127.0.0.1"]
    # The fake's Location (its message URL) is not kept: loopback is no known push service.
    assert result.provider_message_id == ""


def test_send__an_unknown_origins_body_and_location_are_never_stored(settings, webpush, webpush_options):
    import httpx

    secret = "internal-admin-password"

    def handler(request):
        status = int(request.url.path.rsplit("/", 1)[-1].split("-")[-1])
        headers = {"Location": f"https://internal.corp/{secret}"}
        return httpx.Response(status, headers=headers, text=f"internal service says: {secret}")

    results = []
    for status in (201, 301, 404, 410, 413, 429, 500):
        sub = webpush.subscription(f"s-{status}")
        backend = WebPushBackend(alias="webpush", options=webpush_options, timeout=2, concurrency=2)
        backend._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))

        token = sub.as_token()

        results.append(_send_once(backend, token))

    for result in results:
        assert secret not in result.reason and secret not in result.provider_message_id, result
        assert "internal service says" not in result.reason
    assert results[0].outcome == Outcome.DELIVERED


def test_vapid__the_signature_cache_is_bounded(keys):
    signer = VapidSigner(private_key_file=str(keys.vapid_private_key_file), subject="mailto:ops@example.com")
    for i in range(VapidSigner.MAX_ORIGINS + 50):
        signer.authorization(f"https://p{i}.push.example.com/x")
    assert signer.cached_origins() == VapidSigner.MAX_ORIGINS


def test_check_endpoint__the_client_reads_the_same_host():
    checked = check_endpoint("https://fcm.googleapis.com/fcm/send/a:b?x=1")
    assert (checked.host, checked.port, checked.loopback) == ("fcm.googleapis.com", 443, False)


@pytest.fixture
def internal_service():
    """A plain HTTP service on 127.0.0.1 standing in for something inside the site's network."""
    import http.server
    import threading

    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            hits.append(self.path)
            self.send_response(201)
            self.send_header("Location", "/internal/secret-location")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_worker__a_stored_endpoint_inside_the_network_is_never_posted_to(
    settings, webpush, webpush_options, internal_service, scheme
):
    from datetime import timedelta

    from django.utils import timezone

    from notifications.delivery import deliver_batch
    from tests.factories import NotificationFactory

    port, hits = internal_service
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_TIMEOUT": 5.0,
        "PUSH_BACKENDS": {
            "webpush": {"BACKEND": "notifications.backends.webpush.WebPushBackend", "OPTIONS": webpush_options}
        },
    }
    sub = webpush.subscription("victim")
    endpoint = f"{scheme}://127.0.0.1:{port}/internal/reset?all=1"
    # Stored by an older release, which accepted any endpoint.
    token = json.dumps({"endpoint": endpoint, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}})
    row = NotificationFactory(
        backend="webpush", device_token=token, next_attempt_at=timezone.now() - timedelta(seconds=1)
    )

    deliver_batch(owner="worker-a", ttl=30)

    row.refresh_from_db()
    assert hits == [] and webpush.stats()["requests"] == 0
    assert row.status == "failed" and row.provider_message_id == ""
    assert "Nothing was sent" in row.last_error and "secret-location" not in row.last_error


def test_webpush__the_backends_own_client_connects_through_the_guard(webpush_options):
    from notifications.backends.h2transport import H2Client

    backend = WebPushBackend(alias="webpush", options=webpush_options, timeout=2, concurrency=3)
    client = backend.make_client()
    # HTTP/2: every address comes from the guard's check; HTTP/1.1 (a push service without h2): the guarded pool.
    assert isinstance(client, H2Client) and client._resolve.__func__ is GuardedNetworkBackend.checked_addresses
    fallback = client.fallback
    assert isinstance(fallback._transport, GuardedTransport)
    assert isinstance(fallback._transport._pool._network_backend, GuardedNetworkBackend)
    assert fallback.follow_redirects is False
    asyncio.run(client.aclose())


def _lean_guarded_backend(webpush_options, resolve):
    from notifications.backends.h2transport import H2Client

    backend = WebPushBackend(alias="webpush", options=webpush_options, timeout=5, concurrency=2)
    client = backend.make_client()
    assert isinstance(client, H2Client)
    client._resolve = GuardedNetworkBackend(resolve=resolve).checked_addresses
    backend._client = client
    return backend


@pytest.mark.parametrize("allow_loopback", [False, True])
def test_send__the_lean_http2_client_dials_only_checked_addresses(settings, webpush, webpush_options, allow_loopback):
    settings.WEAVE = {**settings.WEAVE, "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": allow_loopback}
    sub = webpush.subscription("victim")
    if allow_loopback:
        token, resolve = sub.as_token(), _resolver(["127.0.0.1"])
    else:  # a listed name made to resolve to the fake on loopback: a rebinding attack
        token = json.dumps({"endpoint": FCM_ENDPOINT, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}})
        resolve = _resolver(["127.0.0.1"])
    backend = _lean_guarded_backend(webpush_options, resolve)

    result = _send_once(backend, token)

    assert resolve.calls  # the guard's resolver chose the address
    if allow_loopback:
        assert (result.outcome, result.http_status) == (Outcome.DELIVERED, 201)
    else:
        assert result.outcome == Outcome.TEMPORARY and not result.systemic and not result.sent
        assert "destination policy" in result.reason and "nothing was sent" in result.reason
        assert webpush.stats()["requests"] == 0


def test_checks__loopback_outside_development_warns_and_a_url_as_host_is_an_error(settings):
    from notifications.checks import check_device_destinations

    settings.DEBUG = False
    settings.WEAVE = {"PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True, "PUSH_WEBPUSH_EXTRA_HOSTS": ["https://x.example/"]}
    assert sorted(m.id for m in check_device_destinations()) == ["notifications.E005", "notifications.W004"]

    settings.WEAVE = {"PUSH_WEBPUSH_EXTRA_HOSTS": ["push.example.org", "*.push.example.net"]}
    assert check_device_destinations() == []
