"""Both kinds of device endpoint on one site, for the hostile-body tests: the plain ones and the DRF viewset."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from notifications.drf import DeviceViewSet

router = DefaultRouter()
router.register("devices", DeviceViewSet, basename="push-device")
urlpatterns = [path("push/", include("notifications.urls")), path("api/", include(router.urls))]
