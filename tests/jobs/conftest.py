import pytest

from tests.jobs.shipping.carrier import carrier, during_booking


@pytest.fixture(autouse=True)
def fresh_carrier():
    carrier.reset()
    during_booking.clear()
    yield carrier
    during_booking.clear()
