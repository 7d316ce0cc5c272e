"""The core has no tables. `Dashboard` is an unmanaged stand-in so the admin lists the Weave dashboard
on its index page and serves it at /admin/weave/dashboard/ (see `weave.dashboard`)."""

from django.db import models


class Dashboard(models.Model):
    class Meta:
        managed = False  # no table: the admin only needs a model to hang the dashboard page on
        default_permissions = ()
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"

    def __str__(self) -> str:
        return "Weave dashboard"
