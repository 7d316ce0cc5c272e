"""The demo site's own pages: a browser page that registers a Web Push subscription through the device API."""

import base64

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from notifications.backends import backend_configs

WEBPUSH_BACKEND = "notifications.backends.webpush.WebPushBackend"

# What the service worker does with a push: show it with the options Weave sent, or nothing for a silent one.
SERVICE_WORKER = """
self.addEventListener("push", (event) => {
  const message = event.data ? event.data.json() : {};
  if (!message.title) return;  // a silent push: data only
  const {title, ...options} = message;
  event.waitUntil(self.registration.showNotification(title, options));
});
"""


@login_required
@require_GET
def push_page(request: HttpRequest) -> HttpResponse:
    """Render the page that subscribes this browser and registers it for the logged-in user."""
    alias, key = _webpush_backend()
    return render(request, "demo/push.html", {"alias": alias, "application_server_key": key})


@require_GET
def service_worker(request: HttpRequest) -> HttpResponse:
    return HttpResponse(SERVICE_WORKER, content_type="application/javascript")


def _webpush_backend() -> tuple[str, str]:
    """The first Web Push backend's alias and its VAPID public key (base64url, uncompressed point), or blanks."""
    from cryptography.hazmat.primitives import serialization

    for alias, config in backend_configs().items():
        if config.get("BACKEND") != WEBPUSH_BACKEND:
            continue
        path = config.get("OPTIONS", {}).get("vapid_private_key_file")
        if not path:
            continue
        with open(path, "rb") as handle:
            private = serialization.load_pem_private_key(handle.read(), password=None)
        point = private.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return alias, base64.urlsafe_b64encode(point).rstrip(b"=").decode()
    return "", ""
