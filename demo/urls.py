from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus: bearer token WEAVE["METRICS_TOKEN"] ($WEAVE_METRICS_TOKEN), else staff sessions only.
    path("metrics", include("weave.urls")),
    # Device registration for the site's apps and browsers (session or PUSH_API_AUTHENTICATE).
    path("push/", include("notifications.urls")),
]
