from django.apps import AppConfig

from weave.conf import SettingsGroup, WeaveSettings, lease_ttl, text


class ShippingSettings(SettingsGroup):
    SHIPPING_LEASE_TTL = lease_ttl("lease TTL of a shipment booking", fallback=WeaveSettings.LEASE_TTL)
    SHIPPING_CARRIER_URL = text("", "the carrier's API", url=True)


class ShippingConfig(AppConfig):
    name = "tests.jobs.shipping"
    label = "shipping"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from tests.jobs.shipping import jobs
        from tests.jobs.shipping.models import Shipment
        from weave.jobs import JobType, RetryPolicy, Step, register

        register(
            JobType(
                name="shipment",
                model=Shipment,
                settings=ShippingSettings,
                ttl_setting="SHIPPING_LEASE_TTL",
                steps=(Step("quote", jobs.quote), Step("book", jobs.book, save=jobs.record_booking)),
                budget=60,
                retry=RetryPolicy(max_attempts=3, backoff=1.0, backoff_max=10.0),
            )
        )
