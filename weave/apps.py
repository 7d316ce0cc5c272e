from typing import Any

from django.apps import AppConfig, apps
from django.db.models.signals import post_migrate


class WeaveConfig(AppConfig):
    name = "weave"
    verbose_name = "Weave"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from weave import checks, extras  # noqa: F401  (registers the system checks)
        from weave.conf import weave_settings
        from weave.dashboard import register_admin, register_core_panels
        from weave.metrics import collect_lease_metrics, collect_retention_metrics, collect_wake_metrics
        from weave.retention import register_core_purges
        from weave.schedules import ScheduleSpec, register_schedule
        from weave.telemetry import register_metrics

        _connect_worker_signals()
        register_core_panels()
        register_metrics("weave.leases", collect_lease_metrics)
        # Retention: the fenced purge of old history, and its progress and backlog in the metrics.
        register_metrics("weave.retention", collect_retention_metrics)
        register_metrics("weave.wake", collect_wake_metrics)
        register_core_purges()
        register_schedule(
            ScheduleSpec(
                name="weave.retention", func="weave.retention.purge_task", minutes=int(weave_settings.RETENTION_EVERY)
            )
        )
        if apps.is_installed("django.contrib.admin"):
            register_admin()

        if _uses_weave_tasks():
            from weave.tasks.worker import ensure_registered

            # The "task" job type: its sweep, watch and lease counts exist before the first enqueue.
            ensure_registered()

        from weave.jobs.declaration import discover

        # A site's `@job` declarations live in its apps' jobs.py, found the way the admin finds admin.py.
        discover()
        if _admin_autodiscovers():
            from weave.jobs.admin import register_job_admins

            register_job_admins()

        # The sweeps exist as soon as the site has migrated: a site that only ran `migrate` and
        # started `qcluster` gets retries and recovery without remembering `weave_schedules`.
        post_migrate.connect(_ensure_schedules_after_migrate, dispatch_uid="weave.schedules.post_migrate")


def _connect_worker_signals() -> None:
    """What each django-q2 worker process gets as it starts (web processes never see these signals): the
    WORKER_DB_* session limits, again before each task (a sync task in the enqueuing process is left
    alone); its own recycle count, so a cluster's workers never all restart at once; a due-time
    watcher thread; a report thread (dashboard, weave_tune); its long-lived heap set aside from the GC."""
    from django_q.signals import post_spawn, pre_execute

    from weave.broker import stagger_recycle
    from weave.heap import settle_after_spawn
    from weave.reports import start_reporter
    from weave.wake import start_watcher
    from weave.worker_db import enter_worker_mode

    for receiver in (enter_worker_mode, stagger_recycle, start_watcher, start_reporter, settle_after_spawn):
        post_spawn.connect(receiver, dispatch_uid=f"{receiver.__module__}.{receiver.__name__}")
    pre_execute.connect(enter_worker_mode, dispatch_uid="weave.worker_db.pre_execute")


def _uses_weave_tasks() -> bool:
    from django.conf import settings

    backends = getattr(settings, "TASKS", None) or {}
    return any(str(conf.get("BACKEND", "")).startswith("weave.tasks") for conf in backends.values())


def _ensure_schedules_after_migrate(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    # post_migrate is sent once per app; act once, on our own, when django-q2's table is there.
    if sender.name != "weave" or not apps.is_installed("django_q"):
        return
    from django.db import connections

    from weave.schedules import ensure_schedules

    with connections[using].cursor() as cursor:
        tables = connections[using].introspection.table_names(cursor)
    if "django_q_schedule" not in tables:
        return
    changes = [(name, what) for name, what in ensure_schedules(using=using) if what != "unchanged"]
    stdout = kwargs.get("stdout")
    if stdout is not None and kwargs.get("verbosity", 1) >= 1:
        for name, what in changes:
            stdout.write(f"  Weave schedule {name}: {what}\n")


def _admin_autodiscovers() -> bool:
    """Whether the site uses the admin with autodiscovery: a site on `SimpleAdminConfig` registers its
    admin classes by hand, and a job admin registered for it first would collide with its own."""
    if not apps.is_installed("django.contrib.admin"):
        return False
    from django.contrib.admin.apps import AdminConfig

    return isinstance(apps.get_app_config("admin"), AdminConfig)
