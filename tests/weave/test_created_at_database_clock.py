"""A job's, a task's and an onboarding run's `created_at` is the database's clock, not the host's.

The host's clock is set 5 minutes ahead in this process (`django.utils.timezone.now`, which
`auto_now_add` and the old enqueue read): the creation must still come before the job's own claim.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from onboarding.models import OnboardingRun
from onboarding.services import onboarding_start
from tests.factories import SupplierFactory
from tests.jobs.invoices.models import Invoice
from tests.jobs.shipping.background import add
from weave.jobs.runner import run_job
from weave.leases.clock import read_database_now
from weave.models import JobAttempt, TaskRow

pytestmark = pytest.mark.django_db
SKEW = timedelta(minutes=5)


@pytest.fixture
def host_clock_ahead(monkeypatch):
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + SKEW)


def db_now():
    return read_database_now(connection)


def test_job__created_at_is_database_time_and_comes_before_its_claim(host_clock_ahead):
    before = db_now()
    invoice = Invoice.objects.create(number="2026-900", email="buyer@example.com")
    after = db_now()
    assert before <= invoice.created_at <= after  # read back by the INSERT, not the host's clock
    assert Invoice.objects.get(pk=invoice.pk).created_at == invoice.created_at
    assert run_job("invoice", invoice.pk, owner="w1") == "done"  # claimed by the database clock
    claimed = JobAttempt.objects.get(job_type="invoice", job_id=str(invoice.pk)).started_at
    assert invoice.created_at <= claimed


def test_job__bulk_create_gives_every_row_the_database_time_and_keeps_a_given_one(host_clock_ahead):
    given = timezone.now() - timedelta(days=3)
    before = db_now()
    made = Invoice.objects.bulk_create(
        [Invoice(number="2026-901", email="a@example.com"), Invoice(number="2026-902", email="b@example.com"),
         Invoice(number="2026-903", email="c@example.com", created_at=given)]
    )  # fmt: skip
    after = db_now()
    stored = {i.number: i.created_at for i in Invoice.objects.filter(pk__in=[i.pk for i in made])}
    assert before <= stored["2026-901"] == stored["2026-902"] <= after  # one read of the database's clock
    assert made[0].created_at == stored["2026-901"]
    assert stored["2026-903"] == given  # a value given explicitly is stored as given


def test_task__enqueued_at_is_the_rows_database_created_at(host_clock_ahead):
    before = db_now()
    result = add.enqueue(1, 2)
    after = db_now()
    row = TaskRow.objects.get(result_id=result.id)
    assert result.enqueued_at == row.created_at  # known right after enqueue, without a read
    assert before <= row.created_at <= after
    assert add.get_result(result.id).enqueued_at == row.created_at


def test_onboarding_run__created_at_is_database_time(host_clock_ahead):
    before = db_now()
    run = onboarding_start(supplier=SupplierFactory(), started_by=None)
    after = db_now()
    assert before <= run.created_at <= after
    assert OnboardingRun.objects.get(pk=run.pk).created_at == run.created_at
