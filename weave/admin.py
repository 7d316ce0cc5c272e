"""Admin pieces every Weave app shares: rows only workers write, lease state by the database clock, timelines.

The core registers no model admin of its own; the apps build theirs from these.
"""

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.db import router, transaction
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from weave.display import admin_link, change_link, clipped, shown, timestamp_column
from weave.explain import explainers
from weave.leases import LEASE_FIELDS, LeaseBusy, LeaseQuerySet, default_clock
from weave.telemetry import db_now
from weave.wording import plural

CONSOLE_CSS = "weave/console.css"
CONSOLE_JS = "weave/console.js"
ACTIONS_CSS = "weave/actions.css"  # a row's actions, offered or disabled with the reason


class ConsoleMedia:
    """The Weave lists' stylesheet and the reload script (reason columns, the phone layout)."""

    css = {"all": [CONSOLE_CSS, ACTIONS_CSS]}
    js = [CONSOLE_JS]


class OperatorLogMixin:
    """History entries (LogEntry) stamped by the database clock, so a job's timeline orders them truly
    against claims and attempts, which the database stamps too. The timelines read them as operator events."""

    empty_value_display = "—"  # one dash on every Weave screen

    def _log_entry(self, request: HttpRequest, obj: Model, flag: int, message: Any) -> LogEntry:
        return record_operator_action(user_id=int(request.user.pk or 0), obj=obj, message=message, flag=flag)

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return self._log_entry(request, obj, CHANGE, message)

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return self._log_entry(request, obj, ADDITION, message)

    def log_deletions(self, request: HttpRequest, queryset: Any) -> Any:
        return [self._log_entry(request, obj, DELETION, "") for obj in queryset]


HELD_ROWS_LISTED = 20  # rows named in one refusal; the rest are counted


class LeaseGuardedDeleteMixin:
    """The admin's deletes of a leased model ("Delete selected" and a row's "Delete") keep every row held under
    a live lease, by the database clock, and say so, naming the holder and when its lease ends.

    A row deleted under its worker leaves that worker writing to nothing: its attempt ends `blocked`, "the row
    is gone". Once the lease is over, the row is deleted as any other. The lease test and the row lock are one
    statement (`LeaseQuerySet.lock_free`), and the delete follows in the same transaction: a worker's claim
    waits for it, and then finds the row gone.
    """

    model: type[Model]

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        actions: dict[str, Any] = super().get_actions(request, **action_location_kwargs(action_location))  # type: ignore[misc]
        if "delete_selected" in actions:
            actions["delete_selected"] = with_func(actions["delete_selected"], _delete_selected_free)
        return actions

    def delete_selected_free(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        """Django's "Delete selected", for the selected rows not held under a live lease; the others are named."""
        from django.contrib.admin.actions import delete_selected

        admin_: Any = self
        if not isinstance(queryset, LeaseQuerySet):
            response: HttpResponse | None = delete_selected(admin_, request, queryset)
            return response
        if request.POST.get("post"):  # confirmed: lock what may go, delete it under that lock
            with transaction.atomic(using=router.db_for_write(self.model)):
                locked = queryset.lock_free()
                self.say_held(request, queryset.exclude(pk__in=locked), final=not locked)
                return delete_selected(admin_, request, queryset.filter(pk__in=locked)) if locked else None
        free = queryset.free_or_expired()
        self.say_held(request, queryset.live(), final=not free.exists())
        # The confirmation page lists, and posts back, only the rows that may go.
        return delete_selected(admin_, request, free) if free.exists() else None

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        admin_: Any = self
        obj = admin_.get_object(request, unquote(object_id))
        rows = self.model._default_manager.filter(pk=obj.pk) if obj is not None else None
        if not isinstance(rows, LeaseQuerySet) or not admin_.has_delete_permission(request, obj):
            return super().delete_view(request, object_id, extra_context)  # type: ignore[misc,no-any-return]
        with transaction.atomic(using=router.db_for_write(self.model)):
            free = rows.lock_free() if request.method == "POST" else rows.free_or_expired().exists()
            if not free:
                self.say_held(request, rows, final=True)
                meta = self.model._meta
                page = f"admin:{meta.app_label}_{meta.model_name}_change"
                return HttpResponseRedirect(reverse(page, args=[quote(obj.pk)], current_app=admin_.admin_site.name))
            return super().delete_view(request, object_id, extra_context)  # type: ignore[misc,no-any-return]

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        rows = self.model._default_manager.filter(pk=obj.pk)
        with transaction.atomic(using=router.db_for_write(self.model)):
            if isinstance(rows, LeaseQuerySet) and not rows.lock_free():
                raise LeaseBusy(f"{obj} is held under a live lease: not deleted.")
            super().delete_model(request, obj)  # type: ignore[misc]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        with transaction.atomic(using=router.db_for_write(self.model)):
            if isinstance(queryset, LeaseQuerySet):
                queryset = queryset.filter(pk__in=queryset.lock_free())
            super().delete_queryset(request, queryset)  # type: ignore[misc]

    def say_held(self, request: HttpRequest, rows: QuerySet[Any], *, final: bool) -> None:
        """Name the rows kept because a worker holds them under a live lease (none: say nothing)."""
        held = list(rows.filter(owner__isnull=False).order_by("pk")[: HELD_ROWS_LISTED + 1])
        if not held:
            return
        from weave.timeline import stamp

        named = "; ".join(
            f"{shown(str(row))}: held by {row.owner} under a live lease until {stamp(row.lease_expires_at)}"
            for row in held[:HELD_ROWS_LISTED]
        )
        more = f"; and more ({rows.count() - HELD_ROWS_LISTED})" if len(held) > HELD_ROWS_LISTED else ""
        message = (
            f"Not deleted: {named}{more} (database time). A worker would find its row gone: delete it once the "
            "lease is over (its worker finishes or lets go)."
        )
        self.message_user(request, message, messages.ERROR if final else messages.WARNING)  # type: ignore[attr-defined]


def _delete_selected_free(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
    response: HttpResponse | None = modeladmin.delete_selected_free(request, queryset)
    return response


_delete_selected_free.allowed_permissions = ("delete",)  # type: ignore[attr-defined]


def record_operator_action(*, user_id: int, obj: Model, message: Any, flag: int = CHANGE) -> LogEntry:
    """Write what a person did to `obj` to the admin history, stamped by the database clock.

    The admin's actions write through this; so may a site's own tools acting for a named user (the demo's
    operator), and the job's timeline then shows it as that person's action.
    """
    if isinstance(message, list):
        import json

        message = json.dumps(message)
    return LogEntry.objects.create(
        action_time=db_now(),
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(obj, for_concrete_model=False),
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        action_flag=flag,
        change_message=message or "",
    )


@dataclass(frozen=True)
class ActionRule:
    """Where one admin action applies: the rows it acts on, and for any other row why it does not.

    `rows(queryset)` narrows a queryset to the rows the action would change (the same states its service
    accepts); `why_not(row)` is a short reason for a row outside them ("delivered at ...: nothing to retry").
    """

    label: str  # what the action is called in a sentence and on a row's page: "Retry now"
    applies_to: str  # the rows it applies to, plural: "pending or failed notifications"
    rows: Callable[[QuerySet[Any]], QuerySet[Any]]
    why_not: Callable[[Any], str]


@dataclass(frozen=True)
class RowAction:
    """One action on a row's page: offered (`reason` empty) or shown disabled with the reason."""

    name: str
    label: str
    reason: str


def action_location_kwargs(action_location: Any) -> dict[str, Any]:
    """What an overriding `get_actions(request, action_location=None)` hands on to Django's own.

    Django 6.1 tells `get_actions` where the actions are offered (the list or a row's page) and deprecates
    overrides without that argument; Django 5.2 has no such argument and never passes one."""
    return {} if action_location is None else {"action_location": action_location}


def with_func(action: Any, func: Callable[..., Any]) -> Any:
    """`action` (as `get_actions` lists it) running `func` instead, its name and description kept.

    Django 6.1 lists each action as an `Action` (unpacking it is deprecated); Django 5.2 as a tuple
    (func, name, description)."""
    if isinstance(action, tuple):
        _, name, description = action
        return (func, name, description)
    return dataclasses.replace(action, func=func)


def _refusing(name: str, action: Any) -> Any:
    """`action` (as `get_actions` lists it) saying why and changing nothing when it applies to none of the
    selected rows (`ActionsWhereTheyApply.refused`), else running as it is."""
    func = action[0] if isinstance(action, tuple) else action.func

    @functools.wraps(func)
    def guarded(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return None if modeladmin.refused(request, name, queryset) else func(modeladmin, request, queryset)

    return with_func(action, guarded)


class ActionsWhereTheyApply:
    """Admin actions offered only where they apply; elsewhere disabled with the reason.

    - The list's action menu leaves out an action that applies to no row at all.
    - Chosen for rows it cannot apply to, the action says why in one line (`refused`) and does not run,
      instead of a confirmation page with an active button or a "skipped" count.
    - A row's page lists the actions the user may take on it, each either a button or disabled with
      the reason (`row_actions`, shown by the change pages of `OperatorModelAdmin` and `LeasedModelAdmin`,
      or by an app's own through the template include `weave/admin/row_actions.html`).

    Set `action_rules` to {action name: ActionRule} on the ModelAdmin.
    """

    action_rules: ClassVar[dict[str, ActionRule]] = {}
    model: type[Model]

    def permitted_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        """The actions this user may take (Django's permission check), whatever the rows' states."""
        found: dict[str, Any] = super().get_actions(request, **action_location_kwargs(action_location))  # type: ignore[misc]
        return found

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        actions = self.permitted_actions(request, action_location)
        everything = self.model._default_manager.all()
        for name, rule in self.action_rules.items():
            if name in actions and not rule.rows(everything).exists():
                actions.pop(name)
            elif name in actions:
                actions[name] = _refusing(name, actions[name])
        return actions

    def refused(self, request: HttpRequest, action: str, queryset: QuerySet[Any]) -> bool:
        """When no selected row is one the action applies to, say why for each and return True."""
        rule = self.action_rules[action]
        if rule.rows(queryset).exists():
            return False
        why = "; ".join(f"#{row.pk} ({rule.why_not(row)})" for row in queryset.order_by("pk")[:20])
        self.message_user(  # type: ignore[attr-defined]
            request,
            f"{rule.label} applies only to {rule.applies_to}; not to the selected: {why}.",
            level=messages.WARNING,
        )
        return True

    def row_actions(self, request: HttpRequest, obj: Model) -> list[RowAction]:
        """The actions on one row's page, each offered or disabled with the reason."""
        permitted = self.permitted_actions(request)
        found = []
        for name, rule in self.action_rules.items():
            if name not in permitted:
                continue  # not this user's to take: not shown at all
            applies = rule.rows(self.model._default_manager.filter(pk=obj.pk)).exists()
            found.append(RowAction(name, rule.label, "" if applies else rule.why_not(obj)))
        return found

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        from django.contrib.admin.utils import unquote

        obj = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]
        meta = self.model._meta
        extra = {
            "weave_row_actions": self.row_actions(request, obj) if obj is not None else [],
            "weave_changelist_url": reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"),
        }
        response: HttpResponse = super().change_view(  # type: ignore[misc]
            request, object_id, form_url, {**(extra_context or {}), **extra}
        )
        return response


def story_context(kind: str, object_id: str) -> dict[str, Any]:
    """What a job's change page opens with: its plain-language summary and its timeline.

    Empty when no explainer tells `kind` jobs or the row does not exist (the admin then says so itself).
    """
    from django.contrib.admin.utils import unquote
    from django.core.exceptions import ObjectDoesNotExist

    explain = explainers().get(kind)
    pk: Any = unquote(object_id)
    if explain is None:
        return {}
    try:
        timeline = explain(int(pk) if str(pk).isdigit() else pk)
    except (ObjectDoesNotExist, ValueError):
        return {}
    return {
        "weave_story": timeline,
        "weave_story_summary": shown(timeline.summary),
        "weave_story_table": timeline.table_html(),
    }


def change_form_templates(model: type[Model], weave_page: str) -> list[str]:
    """A change form: the app's own template for the model (or the app) if it has one, else `weave_page`
    (the row's actions among the tools; the story-first page of a leased model)."""
    meta = model._meta
    return [
        f"admin/{meta.app_label}/{meta.model_name}/change_form.html",
        f"admin/{meta.app_label}/change_form.html",
        weave_page,
    ]


def choice_filter(
    title: str, parameter: str, choices: dict[str, tuple[str, Callable[[], Any]]]
) -> type[admin.SimpleListFilter]:
    """A list filter offering `choices`: {value: (label, the rows it keeps: a Q or an Exists, built per request)}.

    Conditions are built when the list is read, so a time in them is the database clock's at that moment.
    """

    class ChoiceFilter(admin.SimpleListFilter):
        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return [(value, label) for value, (label, _) in choices.items()]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            chosen = choices.get(self.value() or "")
            return queryset if chosen is None else queryset.filter(chosen[1]())

    ChoiceFilter.title, ChoiceFilter.parameter_name = title, parameter
    ChoiceFilter.__name__ = f"{parameter.split('__')[0].title().replace('_', '')}Filter"
    return ChoiceFilter


def _lease(live: bool) -> Callable[[], Q]:
    return lambda: Q(
        owner__isnull=False, **{"lease_expires_at__gt" if live else "lease_expires_at__lte": default_clock.now()}
    )


# Rows by lease: held under a live lease, held under an expired one, or free (by the database clock).
LeaseStateFilter = choice_filter(
    "lease",
    "lease",
    {"live": ("live", _lease(True)), "expired": ("expired", _lease(False)), "free": ("free", lambda: Q(owner=None))},
)


def state_filter(field: str, values: list[str], parameter: str | None = None) -> type[admin.SimpleListFilter]:
    """A list filter on a state column that names each state as every Weave screen does ("lease lost")."""
    from weave.display import state_word

    def equals(value: str) -> Callable[[], Q]:
        return lambda: Q(**{field: value})

    choices = {value: (state_word(value), equals(value)) for value in values}
    return choice_filter(field, parameter or f"{field}__exact", choices)


WINDOWS = {"15m": ("last 15 minutes", timedelta(minutes=15)), "1h": ("last hour", timedelta(hours=1))}
WINDOWS["24h"] = ("last 24 hours", timedelta(hours=24))


def within_filter(field: str, parameter: str, title: str) -> type[admin.SimpleListFilter]:
    """A list filter "`field` within the last 15 minutes / hour / 24 hours", by the database clock."""

    def since(window: timedelta) -> Callable[[], Q]:
        return lambda: Q(**{f"{field}__gt": db_now() - window})

    return choice_filter(title, parameter, {key: (label, since(window)) for key, (label, window) in WINDOWS.items()})


def link_column(
    field: str, description: str | None = None, *, ordering: str | None = None, text: str = ""
) -> Callable[[Any, Any], str]:
    """A display method linking the row a foreign key `field` points at to its change page (plain text where
    the site has no admin page for it), shown as that row, or as `text` with "{}" for its key ("#{}"),
    which reads no row. Sortable by the key unless `ordering` says otherwise ("run__supplier__legal_name")."""

    @admin.display(description=description or field.replace("_", " "), ordering=ordering or field)
    def show(self: Any, obj: Any) -> str:
        if not text:
            return admin_link(getattr(obj, field))
        target = obj._meta.get_field(field)
        pk = getattr(obj, target.attname)
        return "—" if pk is None else change_link(target.related_model, pk, text.format(pk))

    show.__name__ = f"{field}_link"
    return show


def clipped_column(field: str, description: str | None = None, *, one_line: bool = False) -> Callable[[Any, Any], str]:
    """A list column showing a text `field` cut to two lines (`one_line`: one, for names, tokens and workers),
    whole on hover and on the row's page (`clipped`); sortable by the field."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def show(self: Any, obj: Any) -> str:
        return clipped(getattr(obj, field), one_line=one_line)

    show.__name__ = f"short_{field}"
    return show


def permission_check(permission: str) -> Callable[[Any, HttpRequest], bool]:
    """The `has_<name>_permission` method an action with `permissions=["<name>"]` needs, for a permission of
    the app's own ("app_label.codename"): whether the user holds it. Without the permission the action is
    neither offered nor run.

        has_start_onboarding_permission = permission_check("weave_onboarding.start_onboarding")
    """

    def check(self: Any, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(permission))

    check.__name__ = f"has_{permission.rpartition('.')[2]}_permission"
    return check


class ReadOnlyAdminMixin:
    """Rows written only by workers (receipts, attempts, domain writes): visible, never edited by hand."""

    empty_value_display = "—"  # one dash on every Weave screen

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyTabularInline(ReadOnlyAdminMixin, admin.TabularInline):
    """A tabular inline of rows written only by workers, its table in a scrolling region a keyboard can reach.

    On a narrow screen Django scrolls a tabular inline sideways inside its own box; a read-only one holds
    nothing focusable, so a keyboard user could not scroll it. The region takes focus and has a name.
    """

    template = "weave/admin/edit_inline/readonly_tabular.html"
    extra = 0


class LeaseGuardedSaveMixin:
    """A change page's Save writes only the fields its form changed, and only while no worker holds the row.

    `Model.save()` would write every column back, the lease fields included, undoing a claim that landed
    after the page was read (a leased model refuses such a save). The lease test and the row lock are one
    statement (`LeaseQuerySet.lock_free`), and the update follows in the same transaction: a row held under
    a live lease (by the database clock) is left as it was, and the page says who holds it until when.
    """

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        rows = obj._meta.default_manager.filter(pk=obj.pk)
        if not change or not isinstance(rows, LeaseQuerySet):
            super().save_model(request, obj, form, change)  # type: ignore[misc]
            return
        columns = {f.name for f in obj._meta.concrete_fields if not f.primary_key} - LEASE_FIELDS
        written = [name for name in form.changed_data if name in columns]
        with transaction.atomic(using=router.db_for_write(obj._meta.model)):
            if not rows.lock_free():
                request._weave_not_saved = _held_message(rows.first() or obj)  # type: ignore[attr-defined]
                return
            obj.save(update_fields=written)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        if not getattr(request, "_weave_not_saved", None):
            super().save_related(request, form, formsets, change)  # type: ignore[misc]

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        if getattr(request, "_weave_not_saved", None):
            return None  # nothing changed: no history entry saying it did
        return super().log_change(request, obj, message)  # type: ignore[misc]

    def response_change(self, request: HttpRequest, obj: Any) -> HttpResponse:
        refused = getattr(request, "_weave_not_saved", None)
        if refused:
            self.message_user(request, refused, messages.ERROR)  # type: ignore[attr-defined]
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)  # type: ignore[misc,no-any-return]


def _held_message(row: Any) -> str:
    from weave.timeline import stamp

    return (
        f"Not saved: {shown(str(row))} is held by {row.owner} under a live lease until {stamp(row.lease_expires_at)} "
        "(database time): its worker may be running it with the fields as they were. Edit it once the lease is over."
    )


class OperatorModelAdmin(OperatorLogMixin, admin.ModelAdmin):
    """A model admin on Weave's screens: the console's stylesheet and script (`ConsoleMedia`), one dash for an
    empty value, what a person did written to the history by the database clock, and an action's outcomes
    said (`report_outcomes`, `say_rows`). Read-only rows add `ReadOnlyAdminMixin` before it; leased jobs use
    `LeasedModelAdmin`."""

    Media = ConsoleMedia

    @property
    def change_form_template(self) -> list[str]:  # type: ignore[override]
        return change_form_templates(self.model, "weave/admin/change_form.html")

    def report_outcomes(
        self,
        request: HttpRequest,
        report: Any,
        *,
        history: str,
        said: tuple[str, str, str],
        ids: Callable[[list[Any]], Any] | None = None,
        changed_level: int = messages.INFO,
    ) -> None:
        """Write each row an action changed to its history (`history`), then say its outcomes.

        `report` has the primary keys an action `changed`, left alone as `busy` (a worker holds them under a
        live lease) and `skipped` (not in a state it applies to). `said` is the sentence for each, in that
        order: a `format_html` template given `{count}`, `{s}` and `{ids}` (see `say_rows`), said only when it
        has rows (the changed at `changed_level`, the others as warnings).
        """
        for row in self.model._default_manager.filter(pk__in=report.changed).order_by("pk"):
            record_operator_action(user_id=int(request.user.pk or 0), obj=row, message=history)
        levels = (changed_level, messages.WARNING, messages.WARNING)
        for pks, text, level in zip((report.changed, report.busy, report.skipped), said, levels, strict=True):
            self.say_rows(request, text, pks, ids=ids, level=level)

    def say_rows(
        self,
        request: HttpRequest,
        text: str,
        rows: Sequence[Any],
        *,
        ids: Callable[[Any], Any] | None = None,
        joiner: str = ", ",
        level: int = messages.INFO,
    ) -> None:
        """Say one outcome of an action when it has `rows`, and nothing when it has none.

        `text` is a `format_html` template given `{count}`, `{s}` (the plural's "s": "{count} job{s}") and
        `{ids}`: what `ids(rows)` makes of the rows (primary keys as links: `partial(linked_ids, Model)`), else
        the rows themselves (keys, or each row's own clause: "#7 (completed)") joined by `joiner`, each escaped
        unless it is already safe HTML.
        """
        if rows:
            listed = ids(rows) if ids else format_html_join(joiner, "{}", ((row,) for row in rows))
            said = format_html(text, count=len(rows), s=plural(len(rows), "{}"), ids=listed)
            self.message_user(request, said, level)


class LeasedModelAdmin(LeaseGuardedSaveMixin, LeaseGuardedDeleteMixin, OperatorModelAdmin):
    """Admin of a leased job: a `lease` column judged by the database clock, a change page that opens with
    the job's story, and the report of what an action did.

    Set `explain_kind` to the kind the app registered with `weave.explain.register_explainer` (the job
    admin, `JobAdminMixin`, finds it from the job type instead). The lease fields themselves stay
    read-only: only `weave.leases` writes them. A row under a live lease is never deleted
    (`LeaseGuardedDeleteMixin`) nor edited (`LeaseGuardedSaveMixin`).
    """

    explain_kind = ""
    lease_expires_at_display = timestamp_column("lease_expires_at", "lease expires at (database clock)")

    def story_kind(self) -> str:
        """The explainer kind of this admin's rows ("" for none: the page then opens with the fields)."""
        return self.explain_kind

    @property
    def change_form_template(self) -> list[str]:  # type: ignore[override]
        return change_form_templates(self.model, "weave/admin/story_change_form.html")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The page opens with the job's story (summary and timeline); the raw fields come after it."""
        extra = dict(extra_context or {})
        kind = "" if "weave_story" in extra else self.story_kind()
        if kind:
            extra.update(story_context(kind, object_id))
        return super().change_view(request, object_id, form_url, extra)

    @admin.display(description="lease")
    def lease(self, obj: Model) -> str:
        """Lease state, holder and fence in one list column: "live · worker-a · fence 3"."""
        from weave.display import clipped

        state = self.lease_state(obj)
        fence = getattr(obj, "fence", 0)
        if state == "free":
            return f"free · fence {fence}"
        return format_html("{} · {} · fence {}", state, clipped(getattr(obj, "owner", "") or "", one_line=True), fence)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        assert isinstance(queryset, LeaseQuerySet), f"{self.model.__name__} is not a leased model"
        # "Live" is judged by the database clock in the same query, never by this web server's clock.
        return queryset.with_lease_state()

    @admin.display(description="lease")
    def lease_state(self, obj: Model) -> str:
        if getattr(obj, "owner", None) is None:
            return "free"
        live = getattr(obj, "lease_live", None)
        if live is None:  # not loaded through get_queryset(): ask the database clock now
            row = self.model._default_manager.filter(pk=obj.pk)
            live = isinstance(row, LeaseQuerySet) and row.live().exists()
        return "live" if live else "expired"

    @admin.display(description="timeline")
    def timeline(self, obj: Model) -> str:
        return explainers()[self.story_kind()](obj.pk).as_html()
