"""The supplier services fake under its older name: `manage.py weave_fake_suppliers` (the benchmarks use it)."""

from onboarding.management.commands.weave_fake_suppliers import Command

__all__ = ["Command"]
