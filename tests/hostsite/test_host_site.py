"""Weave inside someone else's site: built as a wheel, installed into a fresh virtual environment,
run by a host project with its own settings, its own custom user model and PostgreSQL.

The host project (`tests/hostsite/project/`) never imports `demo.settings`; this test proves the
wheel carries everything the apps need (migrations, templates, management commands) and that a real
`qcluster` in that environment delivers a notification and completes an onboarding run.
"""

import os
import uuid
import venv
import zipfile
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from notifications.testing.fake_provider import FakePushProvider
from onboarding.testing.fake_services import FakeSupplierServices
from tests.hostsite.conftest import closure, environment_view, run, wheel_requirements
from tools.processes import PROJECT_ROOT, ProcessGroups, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]
HOST_PROJECT = Path(__file__).parent / "project"


# What this host site uses: PostgreSQL, the onboarding app, the metrics endpoint, the webhook backend.
# Not FCM, APNs, Web Push or the HTTP/2 fakes: their extras stay out of its environment.
HOST_EXTRAS = frozenset({"postgres", "onboarding", "metrics"})
NOT_INSTALLED = ("jwt", "http_ece", "py_vapid", "hypercorn")


@pytest.fixture(scope="module")
def host_python(wheel, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("hostvenv")
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # The third-party distributions come from this test run's own environment, so the test needs no
    # network, but only those `weave-jobs[postgres,onboarding,metrics]` requires: a view of symlinks
    # to exactly that closure, put on the path with a .pth file. Weave itself comes only from the wheel.
    needed = closure(wheel_requirements(wheel), HOST_EXTRAS)
    view = environment_view(tmp_path_factory.mktemp("host-deps"), needed)
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    Path(purelib, "host_deps.pth").write_text(f"{view}\n")
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", wheel])
    return python


def test_host_environment_holds_only_the_extras_it_asked_for(host_python, wheel):
    # Every declared requirement of the core and the chosen extras is met ...
    run([host_python, "-m", "pip", "check"])
    # ... and the unused extras' libraries are not there to lean on.
    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m.split('.')[0])])"
    assert run([host_python, "-c", probe, *NOT_INSTALLED]).strip() == "[]"
    assert run([host_python, "-c", probe, "django", "django_q", "httpx", "psycopg", "stdnum", "prometheus_client"])


def test_host_site_without_the_fcm_extra_is_told_which_extra_to_install(host_python, tmp_path):
    site = tmp_path / "site"
    run(["cp", "-r", HOST_PROJECT, site])
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "DJANGO_SETTINGS_MODULE": "hostsite.settings",
        "HOST_DB_NAME": "not_contacted",
        "HOST_PUSH_URL": "http://127.0.0.1:9/push",
        "HOST_SUPPLIER_API_URL": "http://127.0.0.1:9",
    }
    fcm = {"BACKEND": "notifications.backends.fcm.FCMBackend", "OPTIONS": {"project_id": "p", "credentials_file": "x"}}
    script = (
        "from django.conf import settings\n"
        "from django.core.checks import run_checks\n"
        f"settings.WEAVE = {{**settings.WEAVE, 'PUSH_BACKENDS': {{'phones': {fcm!r}}}}}\n"
        "print([(m.id, m.hint) for m in run_checks() if m.id.endswith('E004')])\n"
    )
    # `shell` runs no system checks of its own: the script runs them with FCM configured.
    out = run([host_python, "manage.py", "shell", "-c", script], cwd=site, env=env)
    assert out.strip().splitlines()[-1] == str(
        [("notifications.E004", 'Install the extra: pip install "weave-jobs[fcm]".')]
    )


@pytest.fixture
def host_db():
    name = f"weave_host_{uuid.uuid4().hex[:8]}"
    admin = {k: v for k, v in connection.get_connection_params().items() if k in ("host", "port", "user", "password")}
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name, admin
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_wheel_carries_migrations_templates_and_commands(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "weave/leases/queryset.py",
        "notifications/migrations/0001_initial.py",
        "onboarding/migrations/0001_initial.py",
        "weave/management/commands/weave_schedules.py",
        "weave/management/commands/weave_explain.py",
        "weave/management/commands/weave_tune.py",
        "weave/migrations/0001_dashboard_admin_page.py",
        "weave/templates/admin/weave/dashboard.html",
        "weave/urls.py",
        # The fakes' commands a host site's own tests and CI start.
        "notifications/management/commands/weave_fake_push.py",
        "onboarding/management/commands/weave_fake_suppliers.py",
    ):
        assert expected in names, f"{expected} is missing from {wheel.name}"
    # The wheel is the library only: no standalone site, demo commands, chaos runner or bench.
    for package in ("tests/", "demo/", "tools/", "bench/"):
        assert not any(n.startswith(package) for n in names), f"{package} must not ship in {wheel.name}"
    # weave/urls.py and notifications/urls.py are URLconfs a site includes (the metrics endpoint, the device
    # API), not a site's root URLconf.
    included = ("weave/urls.py", "notifications/urls.py")
    for module in ("settings.py", "urls.py", "wsgi.py"):
        shipped = [n for n in names if n.endswith(f"/{module}") and n not in included]
        assert not shipped, f"a site's {module} must not ship: {shipped}"
    assert not any("weave_chaos" in n or "weave_demo" in n or "fake_push_provider.py" in n for n in names)
    # Typed packages (PEP 561) and the licence.
    assert {"weave/py.typed", "notifications/py.typed", "onboarding/py.typed"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # The shipped test fakes a host site's own tests may use.
    assert {"notifications/testing/fake_provider.py", "onboarding/testing/fake_services.py"} <= names


def test_host_site_runs_weave_from_the_wheel(host_python, host_db, tmp_path):
    db_name, admin = host_db
    site = tmp_path / "site"
    run(["cp", "-r", HOST_PROJECT, site])
    with FakePushProvider() as push, FakeSupplierServices() as suppliers, ProcessGroups(tmp_path / "logs") as procs:
        env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            "DJANGO_SETTINGS_MODULE": "hostsite.settings",
            "HOST_DB_NAME": db_name,
            "HOST_DB_HOST": str(admin.get("host") or "127.0.0.1"),
            "HOST_DB_PORT": str(admin.get("port") or 5432),
            "HOST_DB_USER": admin.get("user") or "postgres",
            "HOST_PUSH_URL": push.push_url,
            "HOST_SUPPLIER_API_URL": suppliers.url,
        }

        def manage(*args: str) -> str:
            return run([host_python, "manage.py", *args], cwd=site, env=env)

        # Weave is imported from the wheel inside the fresh environment, not from this checkout.
        where = manage("shell", "-c", "import weave, notifications, onboarding; print(weave.__file__)")
        assert str(host_python.parent.parent) in where and str(PROJECT_ROOT) not in where
        manage("check", "--fail-level", "WARNING")
        migrated = manage("migrate", "--noinput")
        # `migrate` alone creates the sweeps (post_migrate); the command only repairs, and here has nothing to do.
        assert "Weave schedule notifications.sweep: created" in migrated
        assert "notifications.sweep: unchanged" in manage("weave_schedules")

        cluster = procs.start("qcluster", [host_python, "manage.py", "qcluster"], env=env, cwd=site)
        started = manage(
            "shell",
            "-c",
            "from accounts.models import Member\n"
            "from onboarding.models import Supplier\n"
            "from onboarding.services import onboarding_start\n"
            "from notifications.services import notification_create\n"
            "m = Member.objects.create_user('buyer@host.example', 'pw')\n"
            "s = Supplier.objects.create(legal_name='Host Supplies Ltd', country='DE', tax_id='DE811907980',"
            " contact_email='ops@host-supplies.example', device_token='host-device-1', iban='DE89370400440532013000')\n"
            "run = onboarding_start(supplier=s, started_by=m)\n"
            "n = notification_create(device_token='host-device-2', title='Hello host', body='From the wheel')\n"
            "print(run.pk, n.pk)\n",
        )
        run_id, notification_id = map(int, started.split()[-2:])

        def state() -> tuple[str, list[str]]:
            with psycopg.connect(dbname=db_name, autocommit=True, **admin) as conn:
                run_status = conn.execute("SELECT status FROM weave_onboarding_onboardingrun WHERE id = %s", [run_id])
                notes = conn.execute("SELECT status FROM weave_notifications_notification ORDER BY id")
                return run_status.fetchone()[0], [row[0] for row in notes]

        try:
            wait_until(
                # Done: the run completed, and both the direct notification and its welcome one delivered.
                lambda: state() == ("completed", ["delivered", "delivered"]),
                timeout=90,
                message="the host site's run to complete and its notifications to be delivered",
            )
        except TimeoutError:
            pytest.fail(f"qcluster log:\n{cluster.log_tail(60)}")

        with psycopg.connect(dbname=db_name, autocommit=True, **admin) as conn:
            creator = conn.execute(
                "SELECT m.email FROM weave_onboarding_onboardingrun r JOIN accounts_member m ON m.id = r.created_by_id "
                "WHERE r.id = %s",
                [run_id],
            ).fetchone()[0]
            receipts = conn.execute(
                "SELECT count(*) FROM weave_onboarding_stepreceipt WHERE run_id = %s", [run_id]
            ).fetchone()
        # The console from the wheel: metrics read this site's database, the dashboard sits in its admin.
        metrics = manage("shell", "-c", "from weave.metrics import render; print(render().decode())")
        assert 'weave_onboarding_runs{status="completed"} 1.0' in metrics
        assert 'weave_notifications{status="delivered"} 2.0' in metrics
        dashboard = "from django.urls import reverse; print(reverse('admin:weave_dashboard_changelist'))"
        urls = manage("shell", "-c", dashboard)
        assert "/admin/weave/dashboard/" in urls
        assert creator == "buyer@host.example"
        assert receipts[0] == 6
        # The direct notification and the run's welcome notification both reached the provider.
        assert push.stats()["unique_deliveries"] == 2
