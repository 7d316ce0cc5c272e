"""The demo site's own ERP table: where its custom onboarding step (demo/steps.py) files each vendor."""

from django.db import models


class ErpVendor(models.Model):
    """A vendor as the site's ERP knows it, written by the `create_erp_vendor` onboarding step."""

    supplier = models.OneToOneField("weave_onboarding.Supplier", on_delete=models.CASCADE, related_name="erp_vendor")
    erp_code = models.CharField(max_length=30, unique=True)
    # Which run and fence wrote the row: the chaos audit checks no stale fence did.
    run = models.ForeignKey("weave_onboarding.OnboardingRun", on_delete=models.PROTECT, related_name="+")
    fence = models.BigIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        verbose_name = "ERP vendor"

    def __str__(self) -> str:
        return self.erp_code
