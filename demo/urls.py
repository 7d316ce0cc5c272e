from django.contrib import admin
from django.urls import include, path

from demo import views

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus: bearer token WEAVE["METRICS_TOKEN"] ($WEAVE_METRICS_TOKEN), else staff sessions only.
    path("metrics", include("weave.urls")),
    # Device registration for the site's apps and browsers (session or PUSH_API_AUTHENTICATE).
    path("push/", include("notifications.urls")),
    # A page that subscribes the browser to Web Push and registers it through the device API.
    path("push-demo/", views.push_page, name="demo-push"),
    path("push-demo/sw.js", views.service_worker, name="demo-push-sw"),
]
