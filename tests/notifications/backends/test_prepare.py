"""A worker's warm-up readies each backend's shared credentials, so its first drain does not load keys or
wait for an access token while its rows wait; a backend that cannot be readied is left to that drain.

Before: the first FCM drain of every new worker process parsed the service account's RSA key (a key check
that costs more CPU than signing) and waited for the token endpoint before its first send.
"""

import time

from notifications.backends.apns import APNsBackend
from notifications.backends.base import Outcome
from notifications.backends.credentials import GoogleAccessToken
from notifications.backends.fcm import FCMBackend
from notifications.backends.webpush import WebPushBackend
from notifications.tasks import warm_up
from tools.processes import wait_until

from .conftest import message, run, send_all

TOKENS = [f"fcm-device-{i:03d}-" + "b" * 20 for i in range(5)]


def _wait_for(check) -> None:
    wait_until(check, timeout=5.0, interval=0.01, message="the token fetch")


def test_the_warm_up_fetches_the_fcm_token__the_first_sends_use_it(fcm, fcm_options, settings):
    settings.WEAVE = {**settings.WEAVE, "PUSH_BACKENDS": {"fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend",
                                                                  "OPTIONS": fcm_options}}}  # fmt: skip

    warm_up()
    _wait_for(lambda: fcm.stats()["token_requests"] == 1)

    assert fcm.stats()["token_requests"] == 1 and fcm.stats()["requests"] == 0  # a token, and nothing sent
    backend = FCMBackend(alias="fcm", options=fcm_options, timeout=5.0, concurrency=5)
    _wait_for(lambda: backend.credentials.current() is not None)
    assert backend.credentials.refreshes == 1

    results = run(send_all(backend, [message(t) for t in TOKENS]))

    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert fcm.stats()["token_requests"] == 1  # the warm-up's token served them all
    assert backend.credentials.fetches == 1


def test_a_failed_warm_up_fetch__is_held_then_the_first_drain_after_the_hold_fetches_again(fcm, fcm_options):
    fcm.configure(token_fault="500")
    FCMBackend.prepare(fcm_options, timeout=5.0)
    backend = FCMBackend(alias="fcm", options=fcm_options, timeout=5.0, concurrency=5)
    _wait_for(lambda: fcm.stats()["token_requests"] == 1 and backend.credentials._inflight is None)

    held = run(send_all(backend, [message(TOKENS[0])]))

    assert held[0].outcome == Outcome.TEMPORARY and not held[0].sent and "HTTP 500" in held[0].reason
    assert fcm.stats()["token_requests"] == 1  # held: the drain reports the warm-up's failure, asks nobody
    fcm.configure(token_fault="")
    backend.credentials.failure_ttl = 0.0
    backend.credentials._failure = None  # the hold lapsed
    later = run(send_all(backend, [message(TOKENS[1])]))
    assert later[0].outcome == Outcome.DELIVERED and fcm.stats()["token_requests"] == 2


def test_prepare_never_waits_on_the_token_endpoint(fcm, fcm_options):
    fcm.configure(token_fault="hang", hang_seconds=3.0)
    started = time.monotonic()

    FCMBackend.prepare(fcm_options, timeout=5.0)

    assert time.monotonic() - started < 1.0  # the fetch runs on its own thread
    _wait_for(lambda: fcm.stats()["token_requests"] == 1)
    assert fcm.stats()["token_requests"] == 1


def test_the_service_account_key_is_parsed_once_for_every_fetch(fcm, fcm_options, monkeypatch):
    import cryptography.hazmat.primitives.serialization as serialization

    loads = []
    real = serialization.load_pem_private_key

    def counting(*args, **kwargs):
        loads.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(serialization, "load_pem_private_key", counting)
    token = GoogleAccessToken(fcm_options["credentials_file"], ca_file=fcm_options["ca_file"], timeout=5.0)

    first = token.get()
    second = token.get(refused=first)

    assert first != second and token.refreshes == 2 and fcm.stats()["token_requests"] == 2
    assert len(loads) == 1


def test_a_key_that_cannot_sign__refused_with_a_reason_that_holds_no_key(fcm, fcm_options, tmp_path):
    import json

    account = json.loads(open(fcm_options["credentials_file"], encoding="utf-8").read())
    account["private_key"] = "-----BEGIN PRIVATE KEY-----\nnot-a-key\n-----END PRIVATE KEY-----\n"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(account), encoding="utf-8")
    backend = FCMBackend(alias="fcm", options={**fcm_options, "credentials_file": str(broken)}, timeout=5.0,
                         concurrency=5)  # fmt: skip

    results = run(send_all(backend, [message(TOKENS[0])]))

    assert results[0].outcome != Outcome.DELIVERED and not results[0].sent
    assert "cannot sign" in results[0].reason and "not-a-key" not in results[0].reason
    assert fcm.stats()["token_requests"] == 0


def test_apns_and_web_push__prepare_signs_and_loads_the_shared_keys(apns_options, webpush_options):
    APNsBackend.prepare(apns_options, timeout=5.0)
    WebPushBackend.prepare(webpush_options, timeout=5.0)

    apns = APNsBackend(alias="apns", options=apns_options, timeout=5.0, concurrency=5)
    webpush = WebPushBackend(alias="webpush", options=webpush_options, timeout=5.0, concurrency=5)

    assert apns.provider_token.refreshes == 1 and apns.provider_token.secret()  # signed before any send
    assert webpush.vapid is WebPushBackend(alias="w2", options=webpush_options, timeout=5.0, concurrency=5).vapid


def test_the_warm_up_skips_a_misconfigured_backend_and_readies_the_rest(fcm, fcm_options, settings, tmp_path):
    settings.WEAVE = {
        **settings.WEAVE,
        "PUSH_BACKENDS": {
            "broken": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {"project_id": "p"}},
            "missing": {"BACKEND": "no.such.Backend", "OPTIONS": {}},
            "fcm": {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": fcm_options},
        },
    }

    warm_up()  # never raises: the drain and the checks report the broken ones
    _wait_for(lambda: fcm.stats()["token_requests"] == 1)

    assert fcm.stats()["token_requests"] == 1
