"""Settings of bench/engine.py: bench/stale_writes.py's (the demo site, both task backends) plus a site's own job type.

The job type is `bench.noop_jobs`: one model and one `@job` function, as the smallest one of docs/jobs.md.
"""

from bench.stale_settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.noop_jobs"]  # noqa: F405
