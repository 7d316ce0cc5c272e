"""A site's own no-op job type for bench/engine.py: one model and one decorated function, as docs/jobs.md shows."""
