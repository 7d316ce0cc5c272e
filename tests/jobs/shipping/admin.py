from django.contrib import admin

from tests.jobs.shipping.models import Shipment
from weave.jobs.admin import JobAdminMixin


@admin.register(Shipment)
class ShipmentAdmin(JobAdminMixin, admin.ModelAdmin):
    list_display = ("pk", "parcel")  # the job's columns (state, attempts, lease, ...) follow these
