"""The backend fixtures (generated keys, the HTTP/2 fakes) for the edge tests that need a provider."""

from tests.notifications.backends.conftest import (  # noqa: F401 - fixtures, registered by being here
    _fresh_credentials,
    apns,
    apns_options,
    apns_server,
    fcm,
    fcm_options,
    fcm_server,
    keys,
)
