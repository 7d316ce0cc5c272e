"""Found by Weave at start, as the admin finds admin.py: no AppConfig code."""

from tests.jobs.invoices.mailer import mailer
from tests.jobs.invoices.models import Invoice
from weave.jobs import job


@job(Invoice)
def send_invoice(ctx):
    return {"message_id": mailer.send(ctx.job.email, f"Invoice {ctx.job.number}", key=ctx.idempotency_key)}
