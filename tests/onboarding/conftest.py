import pytest

from onboarding.fake_services import FakeSupplierServices


@pytest.fixture
def fake_services(settings):
    """The fake supplier services as a real HTTP server on a free port, wired into WEAVE settings."""
    with FakeSupplierServices() as fake:
        settings.WEAVE = {
            **getattr(settings, "WEAVE", {}),
            "SUPPLIER_API_URL": fake.url,
            "SUPPLIER_API_TIMEOUT": 5.0,
            # Retries stay real (they are not lease time) but short, so failure tests run fast.
            "ONBOARDING_RETRY_BACKOFF": 0.01,
            "ONBOARDING_RETRY_AFTER_MAX": 0.02,
        }
        yield fake
