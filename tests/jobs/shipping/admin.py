from django.contrib import admin

from tests.jobs.shipping.models import Shipment
from weave.jobs.admin import JobAdminMixin


@admin.register(Shipment)
class ShipmentAdmin(JobAdminMixin, admin.ModelAdmin):
    job_type = "shipment"
    list_display = ("pk", "parcel", "state", "attempts", "owner", "fence")
