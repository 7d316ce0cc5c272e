"""A `@job` type's admin comes from its declaration alone: the list, the story-first page, guarded actions."""

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from tests.jobs.invoices.models import Invoice
from weave.jobs.runner import run_job

pytestmark = pytest.mark.django_db


def test_list__has_the_job_columns_with_no_admin_py(admin_client, clock):
    invoice = Invoice.objects.create(number="2026-010", email="buyer@example.com")
    run_job("invoice", invoice.pk, owner="w1", clock=clock)
    response = admin_client.get(reverse("admin:invoices_invoice_changelist"))
    assert response.status_code == 200
    page = response.content.decode()
    for column in ("job_state", "attempts", "lease", "next_attempt", "last_error_line"):
        assert f"column-{column}" in page
    assert "free · fence 1" in page and "Retry (failed or cancelled jobs" in page


def test_list__the_key_column_is_headed_id_not_pk(admin_client):
    from tests.jobs.shipping.background import add

    add.enqueue(1, 2)
    page = admin_client.get(reverse("admin:weave_taskrow_changelist")).content.decode()
    assert "column-job_id" in page and ">Pk<" not in page


def test_change_page__opens_with_the_story(admin_client, clock):
    invoice = Invoice.objects.create(number="2026-011", email="buyer@example.com")
    run_job("invoice", invoice.pk, owner="w1", clock=clock)
    page = admin_client.get(reverse("admin:invoices_invoice_change", args=[invoice.pk])).content.decode()
    assert "What happened" in page
    assert page.index("What happened") < page.index('name="number"')


@pytest.fixture
def viewer_client(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_invoice"))
    client.force_login(user)
    return client


def test_actions__a_viewer_changes_nothing_and_is_told_so(viewer_client):
    invoice = Invoice.objects.create(number="2026-012", email="buyer@example.com")
    Invoice.objects.filter(pk=invoice.pk).update(state="failed")
    url = reverse("admin:invoices_invoice_changelist")
    assert "Retry (failed" not in viewer_client.get(url).content.decode()
    response = viewer_client.post(url, {"action": "retry_jobs", "_selected_action": [str(invoice.pk)]}, follow=True)
    said = [str(m) for m in response.context["messages"]]
    assert any("needs change permission" in m for m in said)
    assert Invoice.objects.get(pk=invoice.pk).state == "failed"


def test_a_job_type_declared_after_the_start_gets_the_admin_unless_its_model_has_one():
    from django.contrib import admin

    from weave.jobs import JobType
    from weave.jobs.admin import give_job_admin

    own = admin.site._registry[Invoice]
    late = JobType(name="invoice_late", model=Invoice, handler=lambda ctx: None)
    give_job_admin(late)
    assert admin.site._registry[Invoice] is own  # an admin already there wins
    admin.site.unregister(Invoice)
    try:
        give_job_admin(JobType(name="invoice_unrun", model=Invoice))  # not run by the core: no job admin
        assert not admin.site.is_registered(Invoice)
        give_job_admin(late)
        assert admin.site._registry[Invoice].job_type == "invoice_late"
    finally:
        if admin.site.is_registered(Invoice):
            admin.site.unregister(Invoice)
        admin.site._registry[Invoice] = own


def test_a_site_on_simple_admin_config_gets_no_job_admin_registered_for_it(monkeypatch):
    # Such a site registers its admin classes by hand: a job admin registered first would collide with them.
    import django.contrib.admin
    from django.apps import apps
    from django.contrib.admin.apps import SimpleAdminConfig

    from weave.apps import _admin_autodiscovers

    assert _admin_autodiscovers()  # this suite's admin autodiscovers
    simple = SimpleAdminConfig("django.contrib.admin", django.contrib.admin)
    monkeypatch.setattr(apps, "get_app_config", lambda label: simple)
    assert not _admin_autodiscovers()


def _edit(client, invoice, **fields):
    url = reverse("admin:invoices_invoice_change", args=[invoice.pk])
    data = {"number": invoice.number, "email": invoice.email, "_save": "Save", **fields}
    return client.post(url, data, follow=True)


def test_change_page__saving_a_jobs_own_field_writes_it_and_leaves_the_lease_alone(admin_client, clock):
    """The page's Save wrote every column back (owner, fence, lease expiry), which the model refuses:
    a 500. It writes the fields the form changed, and only those."""
    invoice = Invoice.objects.create(number="2026-013", email="old@example.com")
    run_job("invoice", invoice.pk, owner="w1", clock=clock)
    response = _edit(admin_client, invoice, email="new@example.com")
    assert response.status_code == 200
    row = Invoice.objects.values("email", "number", "state", "owner", "fence").get(pk=invoice.pk)
    assert row == {"email": "new@example.com", "number": "2026-013", "state": "done", "owner": None, "fence": 1}
    said = [str(m) for m in response.context["messages"]]
    assert any("was changed successfully" in m for m in said)


@pytest.mark.django_db(transaction=True)
def test_change_page__a_job_held_under_a_live_lease_is_not_edited(admin_client):
    """A worker holds the job (database clock): the edit is refused and says who holds it until when;
    0 rows change, the worker's lease and the job's fields stay as they were."""
    from weave.leases import default_clock

    invoice = Invoice.objects.create(number="2026-014", email="old@example.com")
    lease = Invoice.objects.claim(invoice.pk, owner="worker-a", ttl=600, clock=default_clock)
    before = Invoice.objects.values("email", "owner", "fence", "lease_expires_at").get(pk=invoice.pk)
    response = _edit(admin_client, invoice, email="new@example.com")
    assert response.status_code == 200
    after = Invoice.objects.values("email", "owner", "fence", "lease_expires_at").get(pk=invoice.pk)
    assert after == before and after["owner"] == "worker-a" and after["fence"] == lease.fence
    said = [str(m) for m in response.context["messages"]]
    assert any("Not saved" in m and "worker-a" in m and "database time" in m for m in said), said
    assert not any("was changed successfully" in m for m in said)


def test_change_page__saving_a_tasks_page_changes_nothing_and_does_not_fail(admin_client):
    """A `django.tasks` task's page has only read-only fields, yet offers Save: it wrote the whole row
    back (a 500); now nothing is written and the fence stays."""
    from tests.jobs.shipping.background import add
    from weave.models import TaskRow

    result = add.enqueue(1, 2)
    row = TaskRow.objects.get(result_id=result.id)
    url = reverse("admin:weave_taskrow_change", args=[row.pk])
    response = admin_client.post(url, {"_save": "Save"}, follow=True)
    assert response.status_code == 200
    after = TaskRow.objects.values("state", "owner", "fence", "args").get(pk=row.pk)
    assert after == {"state": "pending", "owner": None, "fence": 0, "args": [1, 2]}
