from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # Prometheus: bearer token WEAVE["METRICS_TOKEN"] ($WEAVE_METRICS_TOKEN), else staff sessions only.
    path("metrics", include("weave.urls")),
]
