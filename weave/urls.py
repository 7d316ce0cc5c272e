"""URLs a site mounts for Weave: the Prometheus endpoint.

    path("metrics", include("weave.urls"))   # serves /metrics

The dashboard lives in the admin (/admin/weave/dashboard/) and needs no URL of its own.
"""

from django.urls import path

from weave.metrics import metrics_view

app_name = "weave"
urlpatterns = [path("", metrics_view, name="metrics")]
