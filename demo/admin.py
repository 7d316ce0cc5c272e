from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from demo.models import ErpVendor


@admin.register(ErpVendor)
class ErpVendorAdmin(admin.ModelAdmin):
    list_display = ["erp_code", "supplier", "run", "fence", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written by the onboarding step only

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# The demo site is the admin and /metrics only: no "View site" link to a page that is not there.
admin.site.site_url = None
