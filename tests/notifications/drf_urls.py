"""URLs for the DRF viewset test: the viewset registered on a router, as a site would."""

from rest_framework.routers import DefaultRouter

from notifications.drf import DeviceViewSet

router = DefaultRouter()
router.register("devices", DeviceViewSet, basename="push-device")
urlpatterns = router.urls
