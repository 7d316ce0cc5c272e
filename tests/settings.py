"""Test settings: the standalone site plus a small app with a concrete leased model."""

import os

# The suite runs the standalone site in development mode, explicitly: demo.settings defaults to
# production (DEBUG off), which needs a real SECRET_KEY and push credentials. The real qcluster
# children the e2e tests start inherit this environment.
os.environ.setdefault("DEBUG", "true")

from demo.settings import *  # noqa: E402, F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.leasetest", "tests.jobs.shipping", "tests.jobs.invoices"]  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in admin tests

# The push fakes listen on 127.0.0.1: let Web Push reach loopback here, as demo.settings does with DEBUG on
# (off by default in any site). The suite's own processes (the chaos runner, qcluster children) run with
# these settings too. Tests of the destination policy replace settings.WEAVE, which turns it off again.
WEAVE = {**WEAVE, "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True}  # noqa: F405

# django.tasks (the backport on Django 5.2) through Weave: tests/jobs/test_tasks.py
TASKS = {"default": {"BACKEND": "weave.tasks.WeaveBackend"}}
