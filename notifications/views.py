"""JSON endpoints a site's apps and browsers register their push tokens on.

    path("push/", include("notifications.urls"))

    GET  push/devices/             the caller's devices (and, for a session, the CSRF cookie)
    POST push/devices/             register {"backend", "token" (or "fid"), "platform"}: 201 new, 200 already known
    POST push/devices/refresh/     {"backend", "old_token", "token"}: the provider rotated the token
    POST push/devices/unregister/  {"backend", "token"}: the app logged out or the user opted out

Every write goes through the services (`device_register`, `device_deactivate`), so every token check
applies and a repeated request changes nothing more: registering a token twice returns the same device,
so a client may retry any request after a timeout. The caller is a session user (with Django's CSRF
check, as for any form), or whoever the site's `PUSH_API_AUTHENTICATE` callable returns for the
request (token auth for mobile apps, which have no CSRF cookie); `PUSH_API_PERMISSION` may refuse
them. `PUSH_API_RATE` requests per user and minute; past that, 429 with `Retry-After`.
"""

import json
import time
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware, get_token
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_exempt

from notifications.backends import backend_configs
from notifications.backends.registry import backend_class
from notifications.models import Device
from notifications.services import device_deactivate, device_register, device_token_canonical
from weave.conf import weave_settings
from weave.edge import parse_json_object

# A registration is a few hundred bytes; a Web Push subscription under 1 KiB. Anything far larger is refused unread.
BODY_CAP = 16 * 1024
UNREGISTERED = "Unregistered by the user's app."
REFRESHED = "Replaced by a newer token from the same app."


class _Refused(Exception):
    def __init__(self, status: int, message: str, *, field: str = "", headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors = {field or "request": [message]}
        self.headers = headers or {}


def _endpoint(methods: tuple[str, ...]) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Wrap a view: method check, the caller, permission, rate limit, JSON errors."""

    def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt  # token-authenticated apps have no CSRF cookie; session callers are checked in _caller()
        def handle(request: HttpRequest) -> HttpResponse:
            try:
                if request.method not in methods:
                    raise _Refused(405, f"Use {' or '.join(methods)}.", headers={"Allow": ", ".join(methods)})
                user = _caller(request)
                _rate_limit(user)
                return view(request, user)
            except _Refused as refused:
                response = JsonResponse({"errors": refused.errors}, status=refused.status)
                for name, value in refused.headers.items():
                    response[name] = value
                return response
            except ValidationError as exc:
                return JsonResponse({"errors": _errors(exc)}, status=400)

        handle.__name__ = handle.__qualname__ = view.__name__
        handle.__doc__ = view.__doc__
        return handle

    return wrap


@_endpoint(("GET", "POST"))
def devices(request: HttpRequest, user: Any) -> HttpResponse:
    """List the caller's active devices (GET) or register a token for the caller (POST)."""
    if request.method == "GET":
        get_token(request)  # a browser page reads its CSRF cookie from this answer before its first POST
        mine = Device.objects.active().filter(user=user).order_by("pk")
        return JsonResponse({"devices": [device_json(device) for device in mine]})
    body = _body(request)
    backend, token = _text(body, "backend"), _token(body)
    canonical = device_token_canonical(backend=backend, token=token)
    known = Device.objects.filter(backend=backend, token=canonical, user=user, active=True).exists()
    device = device_register(user=user, backend=backend, token=token, platform=_text(body, "platform", required=False))
    return JsonResponse(device_json(device), status=200 if known else 201)


@_endpoint(("POST",))
def refresh(request: HttpRequest, user: Any) -> HttpResponse:
    """Register the provider's new token for the caller and retire the old one."""
    body = _body(request)
    backend = _text(body, "backend")
    old = _own_device(user, backend, _text(body, "old_token"))
    device = device_register(user=user, backend=backend, token=_text(body, "token"), platform=old.platform)
    if device.pk != old.pk:
        device_deactivate(device=old, reason=REFRESHED)
    return JsonResponse(device_json(device))


@_endpoint(("POST",))
def unregister(request: HttpRequest, user: Any) -> HttpResponse:
    """Deactivate one of the caller's devices; its queued notifications are not sent."""
    body = _body(request)
    device = _own_device(user, _text(body, "backend"), _token(body))
    device = device_deactivate(device=device, reason=UNREGISTERED)
    return JsonResponse(device_json(device))


def device_json(device: Device) -> dict[str, Any]:
    """Return what a client may see of its device: never the whole token, which is a credential of sorts."""
    return {
        "id": device.pk,
        "backend": device.backend,
        "platform": device.platform,
        "token_hint": f"…{device.token[-6:]}" if device.platform != Device.Platform.WEB else "(subscription)",
        "active": device.active,
        "created_at": device.created_at.isoformat() if device.created_at else None,
        "last_used_at": device.last_used_at.isoformat() if device.last_used_at else None,
    }


# --- the caller -------------------------------------------------------------------------------------------


def _caller(request: HttpRequest) -> Any:
    """The authenticated user of `request`, checked for permission; raise `_Refused` otherwise."""
    user: Any = None
    if path := weave_settings.PUSH_API_AUTHENTICATE:
        user = import_string(path)(request)
    if user is None:
        session_user = getattr(request, "user", None)
        if session_user is not None and session_user.is_authenticated:
            _check_csrf(request)
            user = session_user
    if user is None or not getattr(user, "is_active", False):
        raise _Refused(401, "Log in first: this endpoint registers devices for the logged-in user.")
    if (path := weave_settings.PUSH_API_PERMISSION) and not import_string(path)(request, user):
        raise _Refused(403, "You may not register devices.")
    return user


def _check_csrf(request: HttpRequest) -> None:
    """Refuse a session-authenticated write without Django's CSRF token, as a form post would be."""
    if request.method in ("GET", "HEAD", "OPTIONS", "TRACE"):
        return
    check = CsrfViewMiddleware(lambda _request: HttpResponse())
    check.process_request(request)
    if check.process_view(request, lambda _request: HttpResponse(), (), {}) is not None:
        raise _Refused(403, "CSRF check failed: send the csrftoken cookie's value as X-CSRFToken.")


def _rate_limit(user: Any) -> None:
    """A fixed one-minute window per user, in the site's cache (shared by every web process that shares it)."""
    window = int(time.time() // 60)
    key = f"weave:push-api:{user.pk}:{window}"
    cache.add(key, 0, timeout=120)
    try:
        used = cache.incr(key)
    except ValueError:  # evicted between add and incr: count this request as the first
        cache.set(key, 1, timeout=120)
        used = 1
    if used > weave_settings.PUSH_API_RATE:
        wait = 60 - int(time.time()) % 60
        raise _Refused(429, f"Too many requests; try again in {wait} s.", headers={"Retry-After": str(wait)})


# --- the request ----------------------------------------------------------------------------------------


def _body(request: HttpRequest) -> dict[str, Any]:
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not length.isdigit() or int(length) > BODY_CAP:
        raise _Refused(413, f"The request body must be JSON of at most {BODY_CAP} bytes.")
    try:
        return parse_json_object(request.body)
    except ValidationError as exc:
        raise _Refused(400, " ".join(exc.messages)) from exc


def _text(body: dict[str, Any], name: str, *, required: bool = True) -> str:
    try:
        value = token_text(body.get(name, "")) if name in ("token", "old_token") else body.get(name, "")
    except TypeError:
        value = None
    if not isinstance(value, str):
        raise _Refused(400, f"{name} must be a string.", field=name)
    if required and not value:
        raise _Refused(400, f"{name} is required.", field=name)
    return value


def _token(body: dict[str, Any]) -> str:
    """The registration a body names: `token`, or `fid` (a Firebase installation ID, stored as "fid:<FID>")."""
    if "fid" in body and "token" not in body:
        return f"fid:{_text(body, 'fid')}"
    return _text(body, "token")


def token_text(value: Any) -> str:
    """A token as sent by a client: text, or a Web Push subscription object (the browser's `toJSON()`).

    The object becomes compact JSON, which the backend canonicalises, so any rendering of the same
    subscription is the same device. Raise `TypeError` for anything else."""
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if not isinstance(value, str):
        raise TypeError(type(value).__name__)
    return value


def own_device(user: Any, backend: str, token: str) -> Device | None:
    """The caller's device with this token (as `device_register` would store it), or None."""
    try:
        token = device_token_canonical(backend=backend, token=token)
        spellings = [token, *backend_class(backend_configs()[backend]["BACKEND"]).token_aliases(token)]
    except (ValidationError, ImproperlyConfigured, KeyError, ValueError):
        return None
    # The exact spelling first: an install registered under two spellings before they were merged.
    mine = Device.objects.filter(backend=backend, token__in=spellings, user=user)
    return min(mine, key=lambda device: device.token != token, default=None)


def _own_device(user: Any, backend: str, token: str) -> Device:
    device = own_device(user, backend, token)
    if device is None:
        # The same answer whether the token is unknown or someone else's: a client learns nothing about others.
        raise _Refused(404, "No device of yours has this token.", field="token")
    return device


def _errors(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {name: [str(m) for m in ValidationError(errors).messages] for name, errors in exc.error_dict.items()}
    return {"request": [str(m) for m in exc.messages]}
