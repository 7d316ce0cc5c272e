"""Which tasks framework `weave.tasks` uses follows Django's version: Django's own on 6, the backport on 5.2."""

import importlib.util
import sys

import django
import pytest

import weave.tasks.compat


def _fresh_compat():
    """A new copy of weave.tasks.compat, imported now (the loaded module is left as it is)."""
    spec = importlib.util.spec_from_file_location("weave_tasks_compat_copy", weave.tasks.compat.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_framework_is_djangos_own_on_django_6_and_the_backport_on_5_2():
    expected = "django.tasks." if django.VERSION >= (6, 0) else "django_tasks."
    for name in ("Task", "TaskResult", "TaskContext", "BaseTaskBackend", "TaskResultDoesNotExist"):
        assert getattr(weave.tasks.compat, name).__module__.startswith(expected), name


def test_without_the_backport__django_6_needs_nothing_and_5_2_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "django_tasks", None)  # as if the backport were not installed
    if django.VERSION >= (6, 0):
        compat = _fresh_compat()
        assert compat.Task.__module__ == "django.tasks.base" and len(compat.get_random_id()) == 32
    else:
        with pytest.raises(ModuleNotFoundError, match=r'pip install "weave-jobs\[tasks\]"'):
            _fresh_compat()
