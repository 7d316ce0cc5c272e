"""TLS client contexts are made once per process for each trust setting and use (`notifications.backends.tls`)."""

import ssl

import certifi

from notifications.backends.destinations import GuardedTransport
from notifications.backends.h2transport import H2Client
from notifications.backends.http import make_client
from notifications.backends.tls import client_context


def test_one_context_per_trust_setting_and_use():
    first = client_context(True, use="h2")
    assert client_context(True, use="h2") is first
    assert client_context(True, use="http/1.1") is not first  # configured differently (no ALPN)
    assert client_context(False, use="h2") is not first
    assert client_context(False, use="h2").verify_mode == ssl.CERT_NONE
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname


def test_a_changed_trust_store_in_the_environment_gets_a_context_of_its_own(monkeypatch):
    default = client_context(True, use="h2")
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where() + ".not-the-same-path")
    monkeypatch.setattr("httpx.create_ssl_context", lambda verify: ssl.create_default_context(cafile=certifi.where()))
    assert client_context(True, use="h2") is not default
    monkeypatch.undo()
    assert client_context(True, use="h2") is default


def test_a_context_of_the_callers_own_is_used_as_it_is():
    own = ssl.create_default_context()
    assert client_context(own, use="h2") is own
    assert H2Client(verify=own)._context() is own


def test_the_clients_of_every_drain_share_the_default_context():
    # Each drain builds its backends, and so its clients, afresh: the trust store is loaded once.
    assert H2Client(verify=True)._context() is H2Client(verify=True)._context()
    pools = [GuardedTransport(verify=True, max_connections=1)._pool for _ in range(2)]
    assert pools[0]._ssl_context is pools[1]._ssl_context is client_context(True, use="httpcore")
    # httpx's own HTTP/2 client (a plain-http emulator's fallback) shares the same one.
    fallback = make_client(timeout=1.0, concurrency=1, http2=True)
    assert fallback._transport._pool._ssl_context is client_context(True, use="httpcore")
