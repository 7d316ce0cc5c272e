"""`django.tasks` through Weave: `TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend"}}`."""

from weave.tasks.backend import WeaveBackend
from weave.tasks.context import WeaveTaskContext

__all__ = ["WeaveBackend", "WeaveTaskContext"]
