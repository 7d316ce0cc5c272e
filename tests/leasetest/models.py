"""A concrete leased model used only by the lease-core tests."""

from django.db import models

from weave.leases import LeasedModel


class Job(LeasedModel):
    state = models.CharField(max_length=20, default="open")
    phase = models.CharField(max_length=40, default="")
    result = models.CharField(max_length=200, default="")
    writes = models.IntegerField(default=0)


class Receipt(models.Model):
    """One attempt's receipt, written in groups by `weave.leases.insert_receipts`."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE)
    owner = models.CharField(max_length=100)
    fence = models.BigIntegerField()
    outcome = models.CharField(max_length=20)
    finished_at = models.DateTimeField()
    retry_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"receipt {self.fence} of job {self.job_id}"


class Sample(LeasedModel):
    """A row with a column of every type the group statements send as an array (and JSON, which they don't)."""

    id = models.AutoField(primary_key=True)  # Job's key is a BigAutoField: both key types travel
    small = models.SmallIntegerField(null=True)
    pos_small = models.PositiveSmallIntegerField(null=True)
    integer = models.IntegerField(null=True)
    pos_int = models.PositiveIntegerField(null=True)
    big = models.BigIntegerField(null=True)
    pos_big = models.PositiveBigIntegerField(null=True)
    flag = models.BooleanField(null=True)
    name = models.CharField(max_length=50, null=True)  # noqa: DJ001 - NULL and "" must both round-trip
    text = models.TextField(null=True)  # noqa: DJ001 - NULL and "" must both round-trip
    when = models.DateTimeField(null=True)
    ratio = models.FloatField(null=True)
    data = models.JSONField(null=True)
    job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL)
