"""Test settings: the standalone site plus a small app with a concrete leased model."""

from demo.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.leasetest"]  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in admin tests
