"""`weave_explain` tells a job's story: the key facts, in time order, and a summary that matches."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import DateTimeField, Value

from notifications.delivery import Hooks, deliver_batch
from notifications.token_display import mask_token
from onboarding.runner import claim_attempt
from onboarding.testing.numbers import german_vat_number
from tests.factories import NotificationFactory, OnboardingRunFactory, SupplierFactory
from weave.leases import FakeClock

pytestmark = pytest.mark.django_db
UNREGISTERED = german_vat_number(9090)
TTL = 30.0


def explain(kind: str, pk: int) -> str:
    from io import StringIO

    out = StringIO()
    call_command("weave_explain", kind, str(pk), stdout=out)
    return out.getvalue()


def assert_in_order(text: str, *facts: str) -> None:
    position = 0
    for fact in facts:
        found = text.find(fact, position)
        assert found >= 0, f"{fact!r} missing (or out of order) after position {position} in:\n{text}"
        position = found + len(fact)


def test_explain_run__blocked_attempt_then_the_new_owner_finishes(fake_services, clock):
    run = OnboardingRunFactory()
    a = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, owner="worker-a")
    a.run_step(a.steps[0])  # A saves the first step, then stalls past its lease
    clock.advance(TTL + 1)
    b = claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, owner="worker-b")
    assert b.execute() == "completed"
    clock.advance(1)
    a._work_through()  # A wakes up and tries its next save
    assert a.outcome == "blocked"

    text = explain("run", run.pk)
    assert_in_order(
        text,
        "claim      fence 1 claimed by worker-a",
        "receipt    step verify_tax_id saved by fence 1",
        "claim      fence 2 claimed by worker-b",
        "receipt    step send_welcome_notification saved by fence 2",
        "completed  fence 2",
        "blocked    fence 1",
        "fence 2 took the row over",
        "holder     nobody holds it (fence 2); status completed",
        "Attempt 1 (fence 1) saved verify_tax_id and lost its lease and was blocked",
        "attempt 2 (fence 2) saved screen_sanctions",
        "completed the run",
        "The run is completed after step send_welcome_notification.",
    )


def test_explain_run__failed_run_gives_the_business_reason(fake_services, clock):
    supplier = SupplierFactory(tax_id=UNREGISTERED)
    fake_services.config.invalid_tax_ids = [UNREGISTERED]  # well-formed, but the registry does not know it
    run = OnboardingRunFactory(supplier=supplier)
    assert claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, owner="worker-a").execute() == "failed"

    text = explain("run", run.pk)
    assert_in_order(
        text,
        f"Onboarding run {run.pk} for {supplier.legal_name}: failed",
        "claim      fence 1 claimed by worker-a",
        "failed     fence 1: verify_tax_id",
        f"{UNREGISTERED} (DE) is invalid: tax id {UNREGISTERED} is not registered",
        "Attempt 1 (fence 1) saved no step and failed the run",
        "The run is failed after step —. Reason on the run: verify_tax_id",
    )


def test_explain__unknown_id_is_a_clear_error():
    with pytest.raises(CommandError, match="No run with id 987654"):
        explain("run", 987654)


def test_admin_change_page_renders_the_run_timeline(fake_services, clock, admin_client):
    supplier = SupplierFactory(tax_id=UNREGISTERED)
    fake_services.config.invalid_tax_ids = [UNREGISTERED]  # well-formed, but the registry does not know it
    run = OnboardingRunFactory(supplier=supplier)
    claim_attempt(run.pk, ttl=TTL, clock=clock, background=False, owner="worker-a").execute()

    page = admin_client.get(f"/admin/weave_onboarding/onboardingrun/{run.pk}/change/").content.decode()
    assert 'class="weave-timeline"' in page
    # The story first (the summary, then the timeline), the raw fields after it.
    assert_in_order(
        page, "Attempt 1 (fence 1) saved no step and failed the run", "fence 1 claimed by worker-a", "field-fence"
    )


def test_explain_notification__delivered_once(push_settings, fake, clock):
    n = NotificationFactory(next_attempt_at=clock.current)
    deliver_batch(clock=clock, owner="worker-a")

    text = explain("notification", n.pk)
    assert n.device_token not in text, "the token is masked as the admin masks it"
    assert_in_order(
        text,
        f"Notification {n.pk} to {mask_token(n.device_token)} (key {n.idempotency_key}): delivered",
        "claim      fence 1 held by worker-a",
        f"send       fence 1 sent key {n.idempotency_key}",
        "delivered  fence 1: HTTP 200",
        "holder     nobody holds it (fence 1); status delivered",
        "Fence 1 delivered it at",
        f"Weave sent key {n.idempotency_key} to the provider once; the notification is delivered.",
    )


def test_explain_notification__tells_the_overlap_story(push_settings, fake, clock):
    """The seed's overlap: A's lease runs out mid-send, B takes over and delivers, A's answer is refused."""
    fake.configure(latency_ms=100)
    n = NotificationFactory(next_attempt_at=clock.current)

    def takeover(_finishing):
        clock.advance(TTL + 1)
        deliver_batch(clock=clock, owner="worker-b", ttl=TTL)
        clock.advance(1)

    deliver_batch(clock=clock, owner="worker-a", ttl=TTL, hooks=Hooks(before_finish=takeover))

    text = explain("notification", n.pk)
    assert_in_order(
        text,
        "claim      fence 1 held by worker-a",
        "claim      fence 2 held by worker-b",
        "delivered  fence 2: HTTP 200",
        "lease_lost fence 1: HTTP 200",
        "fence 2 took the row over",
        "holder     nobody holds it (fence 2); status delivered",
        "Attempt 1 (fence 1) lost its lease to fence 2 while waiting",
        "on the provider, and its answer was refused at 12:00:32",
        "fence 2 delivered it at 12:00:31",
        f"Weave sent key {n.idempotency_key} to the provider twice; the notification is delivered.",
    )
    assert fake.stats()["per_key"][str(n.idempotency_key)] == 2


def test_admin_change_page_renders_the_notification_timeline(push_settings, fake, clock, admin_client):
    n = NotificationFactory(next_attempt_at=clock.current)
    deliver_batch(clock=clock, owner="worker-a")
    page = admin_client.get(f"/admin/weave_notifications/notification/{n.pk}/change/").content.decode()
    assert 'class="weave-timeline"' in page
    # The story first (the summary, then the timeline), the raw fields after it.
    assert_in_order(page, "Fence 1 delivered it at", "fence 1 held by worker-a", "field-fence")


def test_explain_notification__an_unanswered_send_says_how_long_it_waited_not_0_ms(db):
    from datetime import timedelta

    from notifications.models import DeliveryAttempt
    from weave.telemetry import db_now

    n = NotificationFactory()
    sent = db_now() - timedelta(seconds=20)
    DeliveryAttempt.objects.create(
        notification=n,
        owner="worker-a",
        fence=1,
        number=1,
        started_at=sent,
        finished_at=sent + timedelta(seconds=10.2),
        latency_ms=None,  # the backend overran: nothing measured an answer
        outcome="unknown",
        reason="Backend 'default' overran its 10 s deadline; the request may have reached the provider.",
    )
    text = explain("notification", n.pk)
    assert "no HTTP answer in 10.2 s (attempt 1). Backend 'default' overran its 10 s deadline" in text
    assert "got no answer in 10.2 s, so the provider may have it" in text
    assert " 0 ms" not in text and "0.0 s" not in text


def as_manage_py_runs(name: str, *argv: str) -> str:
    """What `manage.py <name> <argv>` prints: its arguments parsed and its checks run as `run_from_argv` does
    (without the connections closed after it: the test's transaction is still open)."""
    from io import StringIO

    from django.core.management import get_commands, load_command_class

    command = load_command_class(get_commands()[name], name)
    options = vars(command.create_parser("manage.py", name).parse_args(list(argv)))
    args = options.pop("args", ())
    out, err = StringIO(), StringIO()
    command.execute(*args, **{**options, "stdout": out, "stderr": err})
    return out.getvalue() + err.getvalue()


@pytest.mark.parametrize("command", ["weave_explain", "weave_tune"])
def test_read_only_diagnostics__print_no_unrelated_system_check_warnings(settings, command):
    """A story or a TTL advice asked for on a site with a check warning (here a webhook without a token)
    is printed alone: the warning is `manage.py check`'s to say, not every diagnostic's."""
    settings.WEAVE = {**settings.WEAVE, "PUSH_URL": "https://push.example.com/v1/send", "PUSH_TOKEN": ""}
    argv = ["notification", str(NotificationFactory().pk)] if command == "weave_explain" else []
    said = as_manage_py_runs(command, *argv)
    assert "notifications.W006" not in said and "System check identified" not in said, said
    assert said.strip(), "the command still printed its own output"


class TickingClock(FakeClock):
    """A fake clock whose every reading is 1 ms later than the one before, as the database's clock moves
    between two statements: a due time read twice is then two times, as on a real database."""

    def now(self, offset: timedelta = timedelta()) -> Value:
        value = Value(self._now + offset, output_field=DateTimeField())
        self._now += timedelta(milliseconds=1)
        return value


def _one_retry_story(fake, clock=None):
    import re

    from notifications.models import DeliveryAttempt, Notification
    from weave.telemetry import db_now
    from weave.timeline import clock_time

    fake.configure(force_status=503)
    n = NotificationFactory(next_attempt_at=db_now() if clock is None else clock.current)
    if clock is None:
        deliver_batch(owner="worker-a")  # the database's own clock
    else:
        deliver_batch(owner="worker-a", clock=clock)
    n = Notification.objects.get(pk=n.pk)
    (attempt,) = DeliveryAttempt.objects.filter(notification=n)
    assert attempt.outcome == DeliveryAttempt.Outcome.TEMPORARY and n.status == Notification.Status.PENDING
    text = explain("notification", n.pk)
    said = set(re.findall(r"due (?:at )?(\d\d:\d\d:\d\d\.\d{3}(?: UTC)?)", text, re.I))
    return attempt, n, said, clock_time(n.next_attempt_at)


def test_explain_notification__one_retry_has_one_due_time_the_rows(push_settings, fake):
    """The receipt of a retried send keeps exactly the due time its finish gave the row (one reading of the
    database clock), so the story tells one due time for one retry, not two a few ms apart."""
    attempt, n, said, due = _one_retry_story(fake)
    assert attempt.retry_at == n.next_attempt_at
    assert said == {due}


def test_explain_notification__one_retry_has_one_due_time_however_the_clock_moves(push_settings, fake):
    attempt, n, said, due = _one_retry_story(fake, TickingClock())
    assert attempt.retry_at == n.next_attempt_at
    assert said == {due}
