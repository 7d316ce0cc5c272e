"""Settings of bench/ox_side.py: django-ox alone, in its own Python 3.12 venv, on its own database.

Nothing of Weave is importable there (the product stays on Python 3.11), so these settings stand alone.
"""

import os

import dj_database_url

SECRET_KEY = "bench-only"
USE_TZ = True  # django-ox stamps leases with the database clock only under USE_TZ
INSTALLED_APPS = ["django_ox"]
# The connection settings of bench/stale_settings.py (the demo site's): one kept connection, health-checked.
DATABASES = {"default": dj_database_url.parse(os.environ["OX_DATABASE_URL"], conn_max_age=60, conn_health_checks=True)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {
    "default": {
        "BACKEND": "django_ox.backend.OxBackend",
        # The same lease as Weave's in bench/stale_settings.py (STALE_LEASE_TTL).
        "OPTIONS": {"LOCK_TIMEOUT": float(os.environ.get("STALE_LEASE_TTL", "1.0"))},
    }
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django_ox": {"handlers": ["stderr"], "level": os.environ.get("OX_LOG_LEVEL", "WARNING")}},
}
