"""A concrete leased model used only by the lease-core tests."""

from django.db import models

from weave.leases import LeasedModel


class Job(LeasedModel):
    state = models.CharField(max_length=20, default="open")
    phase = models.CharField(max_length=40, default="")
    result = models.CharField(max_length=200, default="")
    writes = models.IntegerField(default=0)
