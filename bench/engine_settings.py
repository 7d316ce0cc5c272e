"""Settings of bench/engine.py: bench/stale_writes.py's (the demo site, both task backends) plus a site's own job type.

The job type is the documentation's smallest one, `tests.jobs.invoices` (`@job(Invoice)` in its jobs.py).
"""

from bench.stale_settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.jobs.invoices"]  # noqa: F405
