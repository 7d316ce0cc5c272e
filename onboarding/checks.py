"""System checks for onboarding settings."""

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register

from weave.conf import weave_settings


@register(Tags.compatibility)
def check_onboarding_budget(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse an attempt budget that django-q2 would cut short."""
    if not weave_settings.valid("ONBOARDING_BUDGET"):
        return []  # weave.E006 reports a value of the wrong type or range
    budget = weave_settings.ONBOARDING_BUDGET
    timeout = (getattr(settings, "Q_CLUSTER", None) or {}).get("timeout")
    if isinstance(timeout, (int, float)) and budget >= timeout:
        return [
            Error(
                f"WEAVE['ONBOARDING_BUDGET'] ({budget} s) must be below Q_CLUSTER['timeout'] ({timeout} s): django-q2 "
                "kills a task at its timeout, so the attempt would die mid-step instead of handing the run back.",
                hint="Keep the budget well below timeout, e.g. 90 s for a 120 s timeout.",
                id="onboarding.E001",
            )
        ]
    return []


@register(Tags.compatibility)
def check_onboarding_steps(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse a WEAVE['ONBOARDING_STEPS'] whose entries do not import, break the step protocol or repeat a name."""
    from onboarding.steps.plan import PlanError, load_plan

    if not weave_settings.valid("ONBOARDING_STEPS"):
        return []  # weave.E006 reports a value that is not a list of strings
    paths = weave_settings.ONBOARDING_STEPS
    try:
        load_plan(list(paths))
    except PlanError as exc:
        return [
            Error(
                f"WEAVE['ONBOARDING_STEPS'] is not a usable plan: {exc}.",
                hint="Each entry names a step object or class (docs/onboarding/steps.md); names must be unique.",
                id="onboarding.E003",
            )
        ]
    return []


@register(Tags.compatibility)
def check_onboarding_extra(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Name the [onboarding] extra when the number checks' libraries (stdnum, schwifty, pycountry) are missing."""
    from weave.extras import install_hint, problem

    found = problem("onboarding", "The onboarding app (its tax id, IBAN, BIC and country checks)")
    return [Error(found, hint=install_hint("onboarding"), id="onboarding.E004")] if found else []


@register(Tags.compatibility)
def check_supplier_api_url(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse the onboarding app without WEAVE['SUPPLIER_API_URL']: every step would fail to call out."""
    if not weave_settings.valid("SUPPLIER_API_URL") or weave_settings.SUPPLIER_API_URL:
        return []  # weave.E006 reports a value that is not an http(s) URL
    return [
        Error(
            "WEAVE['SUPPLIER_API_URL'] is not set: every onboarding step calls the supplier services there, so "
            "every run would fail at its first step.",
            hint="Set WEAVE['SUPPLIER_API_URL'] to your supplier services' base URL, e.g. "
            "os.environ.get('SUPPLIER_API_URL', 'https://suppliers.example.com'). For local runs and tests, "
            'manage.py weave_fake_suppliers serves a fake and prints the URL. Leave "onboarding" out of '
            "INSTALLED_APPS if you only send notifications.",
            id="onboarding.E005",
        )
    ]
