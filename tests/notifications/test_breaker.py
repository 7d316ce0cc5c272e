"""Circuit breakers hold back only what failed: a backend alias, or the origin a user chose; others keep going."""

import ssl
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from notifications.delivery import Hooks, deliver_batch, drain
from notifications.models import BreakerOpening, Notification
from notifications.testing.fake_webpush import FakeWebPush, derive_subscription
from notifications.testing.keys import TestKeys
from tests.conftest import TOKEN
from tests.factories import NotificationFactory

pytestmark = pytest.mark.django_db


# --- one backend -------------------------------------------------------------------------------------


def test_breaker__a_run_of_5xx_holds_the_rest_of_its_backend_back(push_settings, fake, clock, settings):
    # PUSH_BREAKER_THRESHOLD is deprecated: it is read as the breaker's minimum number of answers.
    settings.WEAVE = {**push_settings, "PUSH_BREAKER_THRESHOLD": 5, "PUSH_BREAKER_COOLDOWN": 30}
    NotificationFactory.create_batch(20, next_attempt_at=clock.current)
    fake.configure(force_status=502)
    report = deliver_batch(clock=clock, concurrency=1)
    assert report.breaker.startswith("Circuit breaker opened for backend 'default': 5 of its last 5 answers failed")
    assert (report.sent, report.temporary, report.released, report.held) == (5, 5, 15, 15)
    assert fake.stats()["requests"] == 5
    held_back = Notification.objects.filter(attempts=0)
    assert held_back.count() == 15
    assert set(held_back.values_list("status", "owner", "next_attempt_at")) == {
        ("pending", None, clock.current + timedelta(seconds=30))
    }
    assert all("without using an attempt" in e for e in held_back.values_list("last_error", flat=True))
    # The opening outlives the worker: one row, at the database time of the finish, for the console.
    opening = BreakerOpening.objects.get()
    assert opening.reason == report.breaker and opening.owner == report.owner
    assert opening.opened_at == clock.current


def test_breaker__by_default_twenty_failures_in_a_row_open_it(push_settings, fake, clock):
    NotificationFactory.create_batch(30, next_attempt_at=clock.current)
    fake.configure(force_status=503)
    report = deliver_batch(clock=clock, concurrency=1)
    assert "its last 20 answers failed, one after another" in report.breaker
    assert (report.sent, report.held) == (20, 10)


def test_breaker__opens_at_the_configured_ratio_once_the_minimum_volume_is_in(push_settings, fake, clock, settings):
    settings.WEAVE = {**push_settings, "PUSH_BREAKER_WINDOW": 20, "PUSH_BREAKER_MIN_ANSWERS": 10}
    NotificationFactory.create_batch(20, next_attempt_at=clock.current)
    fake.configure(force_status=503)
    report = deliver_batch(clock=clock, concurrency=1)
    assert "10 of its last 10 answers failed" in report.breaker
    assert (report.sent, report.held) == (10, 10)


def _drain_until_done(clock, rounds: int, **kwargs) -> list:
    reports = []
    for _ in range(rounds):
        reports.append(drain(clock=clock, enqueue_more=False, **kwargs))
        if not Notification.objects.filter(status="pending").exists():
            break
        clock.advance(3600)  # past every retry's backoff
    return reports


def test_breaker__a_provider_failing_one_request_in_three_at_random_never_opens_it(
    push_settings, fake, clock, settings
):
    # Each request (first tries and retries alike) fails with chance 1/3, drawn by the fake; twenty in flight.
    settings.WEAVE = {**push_settings, "PUSH_MAX_ATTEMPTS": 25}
    NotificationFactory.create_batch(600, next_attempt_at=clock.current)
    fake.configure(rate_5xx=1 / 3, seed=5)
    reports = _drain_until_done(clock, 12, concurrency=20, batch_size=200)
    assert all(report.breaker == "" and report.held == 0 for report in reports)
    assert not BreakerOpening.objects.exists()
    assert Notification.objects.filter(status="delivered").count() == 600
    assert fake.stats()["requests"] > 800  # about 900: a third of them failed and were retried


def test_breaker__a_provider_failing_nine_requests_in_ten_opens_it_quickly(push_settings, fake, clock):
    NotificationFactory.create_batch(600, next_attempt_at=clock.current)
    fake.configure(rate_5xx=0.9, seed=5)
    report = drain(clock=clock, concurrency=20, batch_size=200, enqueue_more=False)
    assert report.breaker.startswith("Circuit breaker opened for backend 'default'")
    # Open by the minimum volume at the latest (plus what was in flight), and the rest held.
    assert fake.stats()["requests"] <= 200 + 20
    assert report.held >= 380 and BreakerOpening.objects.count() == 1


def test_breaker__bad_credentials_stop_the_backend_after_one_request(push_settings, fake, clock):
    NotificationFactory.create_batch(10, next_attempt_at=clock.current)
    fake.configure(token="the-real-token")
    report = deliver_batch(clock=clock, concurrency=1)
    assert fake.stats()["requests"] == 1
    assert (report.sent, report.released) == (1, 9)
    assert "refused our credentials (HTTP 401)" in report.breaker
    assert Notification.objects.filter(attempts=0, owner__isnull=True).count() == 9


def test_breaker__a_third_of_first_answers_failing_with_twenty_in_flight_does_not_open(push_settings, fake, clock):
    rows = NotificationFactory.create_batch(90, next_attempt_at=clock.current)
    # The first request of every third row (in the order rows are claimed and started) answers 503,
    # whatever order the twenty concurrent requests reach the fake and their answers come back in.
    failing = {str(row.idempotency_key) for row in sorted(rows, key=lambda row: row.pk)[2::3]}
    fake.configure(first_5xx_keys=tuple(sorted(failing)))
    report = drain(clock=clock, concurrency=20, batch_size=90, enqueue_more=False)
    assert report.breaker == "" and report.held == 0
    assert (report.delivered, report.temporary) == (60, 30)
    assert not BreakerOpening.objects.exists()
    assert not Notification.objects.filter(last_error__contains="Held back").exists()


# --- destinations users choose ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def push_keys(tmp_path_factory) -> TestKeys:
    return TestKeys.create(tmp_path_factory.mktemp("breaker-keys"))


@pytest.fixture(scope="module")
def webpush_service(push_keys):
    with FakeWebPush(push_keys) as service:
        yield service


class _Stranger(ThreadingHTTPServer):
    """A push service a user pointed their subscriptions at (another origin): one answer to every POST."""

    daemon_threads = True
    status = 503
    headers: dict[str, str] = {}
    by_subscription: dict[str, tuple[int, dict[str, str]]] = {}  # a subscription id in the path -> its answer
    requests = 0

    @property
    def url(self) -> str:
        # https, as the destination policy demands; loopback is let through for these tests only.
        return f"https://127.0.0.1:{self.server_address[1]}"

    def configure(self, status: int, **headers: str) -> None:
        self.status, self.headers = status, headers

    def stats(self) -> dict[str, int]:
        return {"requests": self.requests}


class _Answer(BaseHTTPRequestHandler):
    server: _Stranger

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1
        status, headers = self.server.status, self.server.headers
        for sub_id, answer in self.server.by_subscription.items():
            if self.path.endswith("/" + sub_id):
                status, headers = answer
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stranger(push_keys):
    server = _Stranger(("127.0.0.1", 0), _Answer)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(push_keys.server_cert, push_keys.server_key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def mixed_backends(settings, fake, webpush_service, push_keys):
    settings.WEAVE = {
        "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True,  # the Web Push services here are local fakes
        "PUSH_TIMEOUT": 3.0,
        "PUSH_LEASE_TTL": 30.0,
        "PUSH_MAX_ATTEMPTS": 3,
        "PUSH_BACKENDS": {
            "default": {
                "BACKEND": "notifications.backends.webhook.WebhookBackend",
                "OPTIONS": {"url": fake.push_url, "token": TOKEN},
            },
            "webpush": {
                "BACKEND": "notifications.backends.webpush.WebPushBackend",
                "OPTIONS": {
                    "vapid_private_key_file": str(push_keys.vapid_private_key_file),
                    "vapid_subject": "mailto:ops@example.com",
                    "ca_file": str(push_keys.ca_file),
                },
            },
        },
    }
    webpush_service.reset()


def _rows(clock, stranger, webpush_service, *, strangers: int, webhook: int = 40, webpush: int = 6):
    """The stranger's rows are due first, so under the old rule their failures came first, in a row."""
    due = clock.current - timedelta(seconds=10)
    evil = [
        NotificationFactory(
            backend="webpush",
            device_token=derive_subscription(stranger.url, f"evil-{i}").as_token(),
            next_attempt_at=due,
        )
        for i in range(strangers)
    ]
    others = NotificationFactory.create_batch(webhook, next_attempt_at=clock.current)
    others += [
        NotificationFactory(
            backend="webpush",
            device_token=webpush_service.subscription(f"user-{i}").as_token(),
            next_attempt_at=clock.current,
        )
        for i in range(webpush)
    ]
    return evil, others


def test_a_strangers_endpoints_answering_503_retry_after_an_hour_hold_nobody_else(
    mixed_backends, fake, stranger, webpush_service, clock
):
    stranger.configure(503, Retry_After="3600")
    evil, others = _rows(clock, stranger, webpush_service, strangers=8)
    report = drain(clock=clock, concurrency=1, enqueue_more=False)
    assert set(Notification.objects.filter(pk__in=[n.pk for n in others]).values_list("status", flat=True)) == {
        "delivered"
    }
    assert report.held == 0 and report.breaker == ""  # 8 answers: below the breaker's minimum volume
    mine = Notification.objects.filter(pk__in=[n.pk for n in evil])
    assert set(mine.values_list("status", "attempts")) == {("pending", 1)}
    assert stranger.stats()["requests"] == 8


def test_a_strangers_origin_opens_its_own_breaker_with_a_capped_hold(
    mixed_backends, fake, stranger, webpush_service, clock, settings
):
    settings.WEAVE = {
        **settings.WEAVE,
        "PUSH_ORIGIN_HOLD_MAX": 120,
        "PUSH_BREAKER_WINDOW": 20,
        "PUSH_BREAKER_MIN_ANSWERS": 10,
    }
    stranger.configure(503, Retry_After="3600")
    evil, others = _rows(clock, stranger, webpush_service, strangers=14)
    report = drain(clock=clock, concurrency=1, enqueue_more=False)
    origin = stranger.url.lower()
    assert report.breaker.startswith(f"Circuit breaker opened for backend 'webpush', origin {origin}: 10 of its last")
    assert report.held == 4 and stranger.stats()["requests"] == 10
    held = Notification.objects.filter(pk__in=[n.pk for n in evil], attempts=0)
    # Held for the cap (120 s), not the hour the stranger asked for, and only the stranger's rows.
    assert set(held.values_list("next_attempt_at", flat=True)) == {clock.current + timedelta(seconds=120)}
    assert held.count() == 4
    assert set(Notification.objects.filter(pk__in=[n.pk for n in others]).values_list("status", flat=True)) == {
        "delivered"
    }
    assert list(BreakerOpening.objects.values_list("reason", flat=True)) == [report.breaker]


def test_one_subscriptions_429s_and_410s_hold_only_that_subscription(
    mixed_backends, fake, stranger, webpush_service, clock, settings
):
    # A small window, so that counting these answers against the origin would open its breaker at once.
    settings.WEAVE = {**settings.WEAVE, "PUSH_BREAKER_WINDOW": 10, "PUSH_BREAKER_MIN_ANSWERS": 4}
    stranger.configure(201)
    stranger.by_subscription = {"noisy": (429, {"Retry_After": "120"}), "gone": (410, {})}
    due = clock.current - timedelta(seconds=10)

    def row(sub_id):
        token = derive_subscription(stranger.url, sub_id).as_token()
        return NotificationFactory(backend="webpush", device_token=token, next_attempt_at=due)

    noisy = [row("noisy") for _ in range(8)]  # due first: the old rule saw eight failures in a row
    gone = [row("gone") for _ in range(2)]
    quiet = [row(f"quiet-{i}") for i in range(12)]
    report = drain(clock=clock, concurrency=1, enqueue_more=False)
    assert report.breaker == "" and report.held == 0
    assert not BreakerOpening.objects.exists()
    assert stranger.stats()["requests"] == 22
    # Every other subscription on the same origin was delivered.
    assert set(Notification.objects.filter(pk__in=[n.pk for n in quiet]).values_list("status", flat=True)) == {
        "delivered"
    }
    # The throttled subscription's rows wait out its own Retry-After, an attempt used, not a breaker hold.
    waiting = Notification.objects.filter(pk__in=[n.pk for n in noisy])
    assert set(waiting.values_list("status", "attempts", "next_attempt_at")) == {
        ("pending", 1, clock.current + timedelta(seconds=120))
    }
    assert all("throttling this subscription" in e for e in waiting.values_list("last_error", flat=True))
    assert set(Notification.objects.filter(pk__in=[n.pk for n in gone]).values_list("status", flat=True)) == {"failed"}


def test_a_307_from_one_endpoint_holds_only_that_origin(mixed_backends, fake, stranger, webpush_service, clock):
    stranger.configure(307, Location="https://elsewhere.example/wp/x")
    evil, others = _rows(clock, stranger, webpush_service, strangers=3)
    report = drain(clock=clock, concurrency=1, enqueue_more=False)
    assert stranger.stats()["requests"] == 1  # fatal: its origin opened at once
    assert f"origin {stranger.url.lower()}" in report.breaker and report.held == 2
    assert Notification.objects.filter(pk__in=[n.pk for n in evil], attempts=0).count() == 2
    assert set(Notification.objects.filter(pk__in=[n.pk for n in others]).values_list("status", flat=True)) == {
        "delivered"
    }
    assert fake.stats()["requests"] == 40 and len(webpush_service.plaintexts()) == 6


@pytest.mark.parametrize("recovered", [True, False])
def test_half_open__one_probe_while_the_scopes_other_rows_wait_then_closed_or_held_again(
    push_settings, fake, clock, recovered
):
    NotificationFactory.create_batch(6, next_attempt_at=clock.current)
    fake.configure(token="the-real-token")  # our token is refused: fatal, the backend's breaker opens at once
    finishes = []

    def cooldown_passes(_pks):
        finishes.append(len(_pks))
        if len(finishes) == 1:
            clock.advance(31)  # past the 30 s hold
            if recovered:
                fake.configure(token=None)

    report = deliver_batch(clock=clock, concurrency=3, ttl=120, hooks=Hooks(before_finish=cooldown_passes))
    assert BreakerOpening.objects.count() == (1 if recovered else 2)
    requests = fake.stats()["requests"]
    if recovered:
        # The probe's good answer closed the scope; the rows that waited for it went out after it. (The
        # first three were in flight together: the two behind the refused one may have been sent after
        # the fake took our token again.)
        assert (report.held, requests) == (0, 6)
        assert 3 <= report.delivered == Notification.objects.filter(status="delivered").count() <= 5
        assert not Notification.objects.filter(attempts=0).exists()
    else:
        # The probe failed: the scope opened again and the waiting rows were held, no attempt used.
        assert "half-open probe failed" in BreakerOpening.objects.order_by("pk").last().reason
        assert (report.held, requests) == (2, 4)
        assert Notification.objects.filter(attempts=0).count() == 2
