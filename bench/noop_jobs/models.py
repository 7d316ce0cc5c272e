from django.db import models

from weave.models import JobModel


class NoopJob(JobModel):
    note = models.CharField(max_length=20, blank=True, default="")
