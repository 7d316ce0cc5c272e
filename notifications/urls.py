"""URLs a site mounts for its apps' device registrations: `path("push/", include("notifications.urls"))`."""

from django.urls import path

from notifications import views

app_name = "notifications"
urlpatterns = [
    path("devices/", views.devices, name="devices"),
    path("devices/refresh/", views.refresh, name="device-refresh"),
    path("devices/unregister/", views.unregister, name="device-unregister"),
]
