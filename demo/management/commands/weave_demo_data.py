"""Create the demo's suppliers and a few notifications, once: running it again changes nothing."""

from django.core.management.base import BaseCommand
from django.db import transaction

# (legal name, country, tax id, IBAN): every number is well-formed (validation refuses anything else
# before a run starts). The fake supplier services accept all of them except the last one's account,
# which `make run` starts the fake with as closed (--refused-iban), so the demo shows a run that fails
# for a business reason at the bank-account step too.
SUPPLIERS = [
    ("Acme Fasteners GmbH", "DE", "DE811907980", "DE89370400440532013000"),
    ("Blue Harbour Logistics BV", "NL", "NL853746333B01", "NL91ABNA0417164300"),
    ("Clyde Valley Paper Ltd", "GB", "GB980780684", "GB33BUKB20201555555555"),
    ("Dupont Emballages SARL", "FR", "FR40303265045", "FR1420041010050500013M02606"),
    ("Evergreen Office Supply Inc", "US", "US943213276", "GB29NWBK60161331926819"),  # an EIN; a UK account
    ("Faulty Fixtures Co", "DE", "DE100042423", "DE91370400440000004242"),
]
CLOSED_ACCOUNT_IBAN = SUPPLIERS[-1][3]
# The account number the supplier sends when told its old one is closed: what the demo operator
# (weave_demo_operator) corrects it to before retrying the failed run.
CORRECTED_IBAN = "DE02120300000000202051"
DEMO_TOKEN_PREFIX = "demo-device-"


class Command(BaseCommand):
    help = "Create demo suppliers and a few notifications (idempotent: existing demo rows are left alone)."

    def handle(self, *args, **options):
        import logging

        # django-q2 logs each enqueue and Weave each start at INFO; the demo's start-up output says what it
        # created instead, once (the workers' logs in .run/demo/ keep every event). Restored afterwards:
        # a caller in the same process (a test, a site's own command) keeps its own levels.
        loggers = [logging.getLogger(name) for name in ("django-q", "weave")]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        try:
            self._create()
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)

    def _create(self) -> None:
        from notifications.models import Notification
        from notifications.services import notification_create
        from onboarding.models import Supplier

        created = 0
        with transaction.atomic():
            for i, (name, country, tax_id, iban) in enumerate(SUPPLIERS):
                _, new = Supplier.objects.get_or_create(
                    legal_name=name,
                    defaults={
                        "country": country,
                        "tax_id": tax_id,
                        "iban": iban,
                        "contact_email": f"accounts{i}@{name.split()[0].lower()}.example",
                        "device_token": f"{DEMO_TOKEN_PREFIX}supplier-{i}",
                    },
                )
                created += new
            self.stdout.write(f"Suppliers: {created} created, {len(SUPPLIERS) - created} already there.")
            self._start_failing_run()

            self._devices()
            phones = Notification.objects.filter(device_token__startswith=DEMO_TOKEN_PREFIX + "phone")
            if phones.exists():
                self.stdout.write(f"Notifications to demo phones: 0 created, {phones.count()} already there.")
            else:
                for i in range(3):
                    notification_create(
                        device_token=f"{DEMO_TOKEN_PREFIX}phone-{i}",
                        title=f"Demo notification {i + 1}",
                        body="Sent through the fake push provider by the demo.",
                        data={"demo": True},
                    )
                self.stdout.write("Notifications to demo phones: 3 created.")
        pending = Notification.objects.filter(status=Notification.Status.PENDING).count()
        total = Notification.objects.count()
        self.stdout.write(f"Notifications in the database: {total}, {pending} of them pending; qcluster delivers them.")

    def _start_failing_run(self) -> None:
        """Start onboarding for the supplier whose bank account is closed, so a failed run (to fix and
        retry) is on the screens within seconds. It is started by the demo's scripted operator, as
        `weave_demo_operator` later retries it: the run's story names who did what."""
        from demo.people import USERNAME, demo_operator
        from onboarding.admin import start_recorded
        from onboarding.models import OnboardingRun, Supplier

        supplier = Supplier.objects.filter(iban=CLOSED_ACCOUNT_IBAN).first()
        if supplier is None or OnboardingRun.objects.filter(supplier=supplier).exists():
            return
        run = start_recorded(supplier=supplier, user=demo_operator())
        self.stdout.write(
            f"Onboarding: run {run.pk} started by {USERNAME} for {supplier} (it fails at the bank account step)."
        )

    def _devices(self) -> None:
        """With the provider fakes running (WEAVE_PUSH_BACKENDS_FILE), give the demo admin a live and a dead
        device on each of FCM, APNs and Web Push, and send to them once: the admin then shows deliveries
        through every backend and the dead devices pruned."""
        import json
        import os
        from pathlib import Path

        from django.contrib.auth import get_user_model

        from notifications.models import Device
        from notifications.services import device_register, notification_send_to_user
        from notifications.testing.push_fakes import TOKENS_FILE

        backends_file = os.environ.get("WEAVE_PUSH_BACKENDS_FILE")
        if not backends_file:
            return
        if Device.objects.exists():
            self.stdout.write(f"Devices: 0 registered, {Device.objects.count()} already there.")
            return
        tokens = json.loads((Path(backends_file).parent / TOKENS_FILE).read_text())
        user = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
        platforms = {"fcm": "android", "apns": "ios", "webpush": "web"}
        for kind in ("live", "dead"):
            for backend, token in tokens[kind].items():
                device_register(user=user, backend=backend, token=token, platform=platforms[backend])
        rows = notification_send_to_user(
            user=user, title="Hello from every backend", body="FCM, APNs and Web Push fakes", ttl=3600
        )
        self.stdout.write(f"Devices: 6 registered (3 of them dead); notifications to them: {len(rows)} created.")
