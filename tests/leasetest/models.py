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
