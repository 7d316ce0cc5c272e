"""The smallest site job type: one model here and one decorated function in jobs.py (docs/jobs.md)."""

from django.db import models

from weave.models import JobModel


class Invoice(JobModel):
    number = models.CharField(max_length=20)
    email = models.EmailField()
    sent_as = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return f"invoice {self.number}"
