"""The demo's scripted people: who the demo's own tools act as, so the timelines name them."""

from typing import Any

USERNAME = "demo-operator"


def demo_operator() -> Any:
    """The demo's scripted operator: staff, allowed to start and retry onboarding, unable to log in."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user, created = get_user_model()._default_manager.get_or_create(
        username=USERNAME, defaults={"first_name": "Demo", "last_name": "Operator", "is_staff": True}
    )
    if created:
        user.set_unusable_password()
        user.save()
        wanted = [("weave_onboarding", "start_onboarding"), ("weave_onboarding", "retry_run")]
        wanted += [("weave_onboarding", "change_supplier")]
        for app_label, codename in wanted:
            user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return get_user_model()._default_manager.get(pk=user.pk)  # fresh: permissions are cached per instance
