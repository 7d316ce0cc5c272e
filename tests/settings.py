"""Test settings: the standalone site plus a small app with a concrete leased model."""

import os

# The suite runs the standalone site in development mode, explicitly: demo.settings defaults to
# production (DEBUG off), which needs a real SECRET_KEY and push credentials. The real qcluster
# children the e2e tests start inherit this environment.
os.environ.setdefault("DEBUG", "true")

from demo.settings import *  # noqa: E402, F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.leasetest", "tests.jobs.shipping"]  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in admin tests

# django.tasks (the backport on Django 5.2) through Weave: tests/jobs/test_tasks.py
TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend"}}
