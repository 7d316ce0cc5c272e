"""A site's own fenced job: book a parcel with a carrier and charge for it (the example of docs/jobs.md)."""

from django.db import models

from weave.models import JobModel


class Shipment(JobModel):
    """One parcel to book: what the site asks for, and what the job found out."""

    parcel = models.CharField(max_length=100)
    price_cents = models.IntegerField(null=True)

    def __str__(self) -> str:
        return f"shipment {self.pk} ({self.parcel})"


class Booking(models.Model):
    """The site's own domain row, written inside the job's guarded transaction."""

    shipment = models.ForeignKey(Shipment, on_delete=models.CASCADE)
    carrier_ref = models.CharField(max_length=100)
    written_by = models.CharField(max_length=100)

    def __str__(self) -> str:
        return f"booking {self.carrier_ref}"
