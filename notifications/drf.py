"""Django REST framework versions of the device endpoints, for sites that already serve an API with DRF.

    from rest_framework.routers import DefaultRouter
    from notifications.drf import DeviceViewSet

    router = DefaultRouter()
    router.register("devices", DeviceViewSet, basename="push-device")

Optional: Weave does not require DRF, and nothing imports this module unless the site does. The viewset
uses the site's own DRF authentication, permission and throttle settings, and calls the same services
as `notifications.views`, so every token check applies and repeating a request is safe.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ValidationError
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.exceptions import ValidationError as APIValidationError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from notifications.models import Device
from notifications.services import device_deactivate, device_register, device_token_canonical
from notifications.views import BODY_CAP, REFRESHED, UNREGISTERED, device_json, own_device, token_text
from weave.edge import parse_json_object


class StrictJSONParser(JSONParser):
    """DRF's JSON parser with the plain endpoints' rules (`weave.edge.parse_json_object`): one
    object, UTF-8, no duplicate keys, no NaN, no deep nesting; a bad body is a 400, never a 500."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        raw = stream.read(BODY_CAP + 1) if stream is not None else b""
        if len(raw) > BODY_CAP:
            raise ParseError(f"The request body must be JSON of at most {BODY_CAP} bytes.")
        try:
            return parse_json_object(raw)
        except ValidationError as exc:
            raise ParseError(" ".join(exc.messages)) from exc


class TokenField(serializers.Field):
    """A device token: text, or a Web Push subscription object as the browser gives it."""

    def to_internal_value(self, data: Any) -> str:
        try:
            return token_text(data)
        except TypeError:
            raise serializers.ValidationError("A token is text, or a Web Push subscription object.") from None


class RegisterSerializer(serializers.Serializer):
    backend = serializers.CharField(max_length=50)
    token = TokenField()
    platform = serializers.CharField(max_length=20, required=False, allow_blank=True, default="")


class RefreshSerializer(serializers.Serializer):
    backend = serializers.CharField(max_length=50)
    old_token = TokenField()
    token = TokenField()


class UnregisterSerializer(serializers.Serializer):
    backend = serializers.CharField(max_length=50)
    token = TokenField()


class DeviceViewSet(viewsets.ViewSet):
    """The caller's push devices: list, register, refresh a rotated token, unregister."""

    permission_classes = [IsAuthenticated]
    # JSON through the strict parser; the site's other parsers (forms, say) as they are.
    parser_classes = [
        StrictJSONParser,
        *(p for p in api_settings.DEFAULT_PARSER_CLASSES if not issubclass(p, JSONParser)),
    ]

    def list(self, request: Request) -> Response:
        mine = Device.objects.active().filter(user=request.user).order_by("pk")
        return Response({"devices": [device_json(device) for device in mine]})

    def create(self, request: Request) -> Response:
        given = _valid(RegisterSerializer, request)
        with _as_api_errors():
            canonical = device_token_canonical(backend=given["backend"], token=given["token"])
            known = Device.objects.filter(
                backend=given["backend"], token=canonical, user=request.user, active=True
            ).exists()
            device = device_register(user=request.user, **given)
        return Response(device_json(device), status=status.HTTP_200_OK if known else status.HTTP_201_CREATED)

    @action(detail=False, methods=["post"])
    def refresh(self, request: Request) -> Response:
        given = _valid(RefreshSerializer, request)
        old = _mine(request, given["backend"], given["old_token"])
        with _as_api_errors():
            device = device_register(
                user=request.user, backend=given["backend"], token=given["token"], platform=old.platform
            )
            if device.pk != old.pk:
                device_deactivate(device=old, reason=REFRESHED)
        return Response(device_json(device))

    @action(detail=False, methods=["post"])
    def unregister(self, request: Request) -> Response:
        given = _valid(UnregisterSerializer, request)
        device = device_deactivate(device=_mine(request, given["backend"], given["token"]), reason=UNREGISTERED)
        return Response(device_json(device))


def _valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _mine(request: Request, backend: str, token: str) -> Device:
    device = own_device(request.user, backend, token)
    if device is None:
        raise NotFound("No device of yours has this token.")
    return device


@contextmanager
def _as_api_errors() -> Iterator[None]:
    """Turn the services' `ValidationError` (keyed by field) into DRF's 400, keyed the same way."""
    try:
        yield
    except ValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        raise APIValidationError(detail) from exc
