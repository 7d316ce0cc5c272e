"""A site's own onboarding step: file the new vendor in the site's ERP table."""

from demo.models import ErpVendor
from onboarding.steps import BaseStep, Output, StepContext


class CreateErpVendor(BaseStep):
    name = "create_erp_vendor"
    title = "Create ERP vendor"

    def work(self, ctx: StepContext) -> Output:
        # The slow part runs under the heartbeat and writes nothing. A real ERP call goes here:
        #   status, answer = ctx.post("https://erp.example/vendors", {...})  (keyed, retried)
        vendor_number = ctx.outputs["create_vendor_record"]["vendor_number"]
        return {"erp_code": f"ERP-{ctx.supplier.country}-{vendor_number}"}

    def commit(self, ctx: StepContext, output: Output) -> Output:
        # Inside the guarded transaction: if the lease was lost, none of this lands.
        row, created = ErpVendor.objects.update_or_create(
            supplier=ctx.supplier,
            defaults={"erp_code": output["erp_code"], "run": ctx.run, "fence": ctx.fence, "created_at": ctx.now()},
        )
        return {**output, "created": created}

    def undo(self, ctx: StepContext, output: Output) -> None:
        # "Cancel and undo": remove the row only if this run created it.
        if output.get("created"):
            ErpVendor.objects.filter(supplier=ctx.supplier, run=ctx.run).delete()
