"""Public API of the notifications app."""

import functools
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, models, router, transaction
from django.db.models import signals
from django.dispatch import receiver

from notifications import insert, locked_insert, queue
from notifications.backends import DEFAULT_ALIAS, PushBackend, backend_configs
from notifications.backends.options import DataError
from notifications.backends.registry import backend_class, backend_path
from notifications.content import CONDITION_PREFIX, TOPIC_PREFIX, check_options
from notifications.devices import deactivate_device, end_queued_for_device, fail_queued_for_device, handed_over_reason
from notifications.models import ContentLocked, Device, Notification
from notifications.quiet import deferral_reason, policy_failure, quiet_hours_policy, quiet_until
from notifications.topics import TopicJobs, TopicLookupError, topic_list, topic_subscribe, topic_unsubscribe
from notifications.validation import TITLE_MAX as NOTIFICATION_TITLE_MAX
from notifications.validation import canonical_device_token, check_payload_size, check_send_at
from weave.conf import weave_settings
from weave.edge import check_ids, check_json, check_text
from weave.events import log_event
from weave.leases import Clock, default_clock, statement_cursor
from weave.workers import SlotClaimSQL

logger = logging.getLogger("weave.notifications")

__all__ = [
    "NOTIFICATION_TITLE_MAX",
    "BulkResult",
    "BulkSend",
    "ContentLocked",
    "SkippedDevice",
    "SkippedUser",
    "TopicJobs",
    "TopicLookupError",
    "UserNotifications",
    "device_deactivate",
    "device_register",
    "device_token_canonical",
    "notification_cancel",
    "notification_check",
    "notification_create",
    "notification_edit",
    "notification_retry_now",
    "notification_send_to_topic",
    "notification_send_to_user",
    "notification_send_to_users",
    "topic_list",
    "topic_subscribe",
    "topic_unsubscribe",
]


def notification_create(
    *,
    title: str,
    body: str,
    data: Mapping[str, Any] | None = None,
    device_token: str | None = None,
    device: Device | None = None,
    backend: str | None = None,
    collapse_key: str | None = None,
    ttl: int | None = None,
    priority: str = Notification.Priority.NORMAL,
    options: Mapping[str, Any] | None = None,
    send_at: datetime | None = None,
    clock: Clock = default_clock,
) -> Notification:
    """Create a notification for a registered `device`, or for a raw `device_token` on `backend`
    (default: the "default" backend), and enqueue its delivery once the transaction commits."""
    if device is not None:
        if device_token is not None or backend is not None:
            raise ValidationError({"device": "Give a device, or a device_token (and backend), not both."})
        with transaction.atomic():
            # Locked so a concurrent deactivation cannot slip between this check and the insert.
            device = Device.objects.select_for_update().filter(pk=device.pk).first()
            if device is None:
                raise ValidationError({"device": "This device does not exist (any more)."})
            if not device.active:
                raise ValidationError(
                    {"device": f"Device {device.pk} is inactive ({device.deactivation_reason or 'deactivated'})."}
                )
            fields = _notification_fields(
                backend=device.backend, token=device.token, title=title, body=body, data=data,
                collapse_key=collapse_key, ttl=ttl, priority=priority, options=options,
            )  # fmt: skip
            # The owner is read only for a quiet-hours policy to judge: without one it is not needed.
            owner = device.user if device.user_id is not None and quiet_hours_policy() is not None else None
            try:
                at, deferral = _quiet_hours(owner, _send_at(send_at, clock), priority, clock)
            except _PolicyFailed as failed:
                raise ValidationError({"device": f"Not created for device {device.pk}: {failed}."}) from failed
            return _insert(fields, device=device, ttl=ttl, send_at=at, clock=clock, deferral=deferral)
    if device_token is None:
        raise ValidationError({"device_token": "A device token (or a device) is required."})
    fields = _notification_fields(
        backend=backend or DEFAULT_ALIAS, token=device_token, title=title, body=body, data=data,
        collapse_key=collapse_key, ttl=ttl, priority=priority, options=options,
    )  # fmt: skip
    at, deferral = _quiet_hours(None, _send_at(send_at, clock), priority, clock)
    # No transaction of its own: the INSERT is the only statement, so outside a transaction it commits
    # by itself (and the drain is requested right after it), and inside the caller's it needs no savepoint
    # (everything that can refuse the row was checked above, before any statement).
    return _insert(fields, device=None, ttl=ttl, send_at=at, clock=clock, deferral=deferral)


def notification_send_to_user(
    *,
    user: Any,
    title: str,
    body: str,
    data: Mapping[str, Any] | None = None,
    collapse_key: str | None = None,
    ttl: int | None = None,
    priority: str = Notification.Priority.NORMAL,
    options: Mapping[str, Any] | None = None,
    send_at: datetime | None = None,
    clock: Clock = default_clock,
) -> "UserNotifications":
    """Create one notification per active device of `user`; return them (maybe none), with `skipped`.

    A device whose token cannot be sent (a backend no longer configured, a token stored before today's
    checks) is skipped and named in `.skipped` with the reason; the others get theirs. Content that a
    backend refuses (FCM's string-only data, say) is the caller's to fix: a ValidationError, nothing stored.
    A constant number of statements whatever the number of devices: on PostgreSQL inside a transaction
    one statement that reads the devices, locks them and inserts their rows (three at most, when a stored
    token needs today's checks: see `_FanOut._send_in_one_statement`); otherwise one read, then on
    PostgreSQL one statement that locks the devices and inserts their rows (and, outside a transaction,
    asks for a drain), or elsewhere a short locking read and one INSERT (see `_insert_still_active`).
    """
    user = _saved_user(user, field="user", required=True)
    created, skipped, skipped_users = _FanOut.of(locals()).send({user.pk: user}, one_user=True)
    return UserNotifications(created, skipped=skipped, skipped_users=skipped_users)


def notification_send_to_users(
    *,
    users: Iterable[Any],
    title: str,
    body: str,
    data: Mapping[str, Any] | None = None,
    collapse_key: str | None = None,
    ttl: int | None = None,
    priority: str = Notification.Priority.NORMAL,
    options: Mapping[str, Any] | None = None,
    send_at: datetime | None = None,
    chunk: int = 500,
    clock: Clock = default_clock,
) -> "BulkSend":
    """Send to every active device of every user in `users` (a queryset, or saved users), `chunk` users at a time.

    All or nothing: every chunk goes in one transaction, so an exception (a database error, a bug) leaves
    no row behind and the call can simply be repeated; it never sends some users a duplicate. Each chunk
    takes a constant number of statements and the users are streamed from the database, so a million
    devices never make a million-row list. A user the site's quiet-hours policy cannot judge (it raised:
    say, a stored time zone that does not exist) is skipped and named in `.skipped_users` with the
    reason, and everyone else gets theirs. Returns how many notifications were created, which users and
    which devices were skipped, and why."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= 10_000:
        raise ValidationError({"chunk": "chunk is a whole number of users from 1 to 10000."})
    message = _FanOut.of(locals())
    result = BulkSend()
    with transaction.atomic(using=router.db_for_write(Notification)):
        for batch in _user_chunks(users, chunk):
            created, skipped, skipped_users = message.send(batch)
            result.created += len(created)
            result.skipped += skipped
            result.skipped_users += skipped_users
    return result


@dataclass
class BulkSend:
    """What `notification_send_to_users` did: notifications created, and the users and devices left out with why."""

    created: int = 0
    skipped: list["SkippedDevice"] = field(default_factory=list)
    skipped_users: list["SkippedUser"] = field(default_factory=list)


def _user_chunks(users: Iterable[Any], size: int) -> Iterator[dict[Any, Any]]:
    """{pk: user} chunks of `users`; a queryset is read `size` rows at a time, never whole."""
    if isinstance(users, models.QuerySet):
        if users.model is not get_user_model():
            raise ValidationError({"users": "users must be a queryset of the site's user model."})
        stream: Iterable[Any] = users.order_by("pk").iterator(chunk_size=size)
    else:
        stream = (_saved_user(user, field="users", required=True) for user in users)
    batch: dict[Any, Any] = {}
    for user in stream:
        batch[user.pk] = user
        if len(batch) >= size:
            yield batch
            batch = {}
    if batch:
        yield batch


# What a fan-out reads of each device: key, backend alias, token, the two times the cap ranks by, owner.
_DEVICE_COLUMNS = ("pk", "backend", "token", "last_used_at", "created_at", "user_id")


@dataclass(frozen=True)
class _FanOut:
    """One message, sent to every active device of a chunk of users: the statements do not grow with devices."""

    title: str
    body: str
    data: Mapping[str, Any] | None
    collapse_key: str | None
    ttl: int | None
    priority: str
    options: Mapping[str, Any] | None
    send_at: datetime | None
    clock: Clock

    def __post_init__(self) -> None:
        _send_at(self.send_at, self.clock)
        _check_ttl(self.ttl)  # before the expiry expression is built from it

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> "_FanOut":
        """The message of a fan-out service call, from its arguments (`locals()`): the services that fan
        out take the same message keywords, so they are read by name here rather than listed twice."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls)})

    def send(
        self, users: Mapping[Any, Any], *, one_user: bool = False
    ) -> tuple[list[Notification], list["SkippedDevice"], list["SkippedUser"]]:
        """Create the rows for `users` ({pk: user}) in one short transaction (or one statement, see
        `_insert_still_active`); return them, the skipped devices and the skipped users. `one_user`:
        `notification_send_to_user`'s send, which may take one statement in all (`_send_in_one_statement`)."""
        timing, skipped_users = self._timings(users)
        judged = {pk: user for pk, user in users.items() if pk in timing}
        done = self._send_in_one_statement(judged, timing) if one_user and len(judged) == 1 else None
        if done is not None:
            created, skipped = done
        else:
            devices = _active_device_rows(list(judged), locking=False)
            planned, skipped = self._plan(devices, timing)
            created = _insert_still_active(planned, judged, skipped)
        return created, sorted(skipped, key=lambda d: d.device_id), skipped_users

    def _send_in_one_statement(
        self, users: Mapping[Any, Any], timing: Mapping[Any, tuple[Any, Any, str]]
    ) -> tuple[list[Notification], list["SkippedDevice"]] | None:
        """One user's send inside the caller's transaction on PostgreSQL: the device read, the locks and the
        INSERT in one statement (`locked_insert.read_and_insert`); None elsewhere (nothing was run).

        Every check that can refuse the message runs before the statement: the message is built for each
        configured backend, and the statement stores nothing if one of the user's devices is on a backend
        that refuses it; the refusal is then raised here as the two-statement path raises it. The rows
        take each device's token as stored; the devices read are then planned as that path plans them,
        and if the plan differs (today's token checks skip a device or change its token, a device is
        beyond the cap, or only such a device was on a refusing backend), the statement's rows go again
        (inside the caller's transaction, never seen by another) and the planned rows are inserted as
        that path inserts them. Outside a transaction the statement would commit by itself before those checks,
        so the send keeps its two statements there."""
        db = router.db_for_write(Notification)
        connection = connections[db]
        if router.db_for_write(Device) != db or router.db_for_read(Device) != db or connection.vendor != "postgresql":
            return None
        if not connection.in_atomic_block and connection.get_autocommit():
            return None
        ((user_id, due),) = timing.items()
        messages = self._configured_messages()
        # Not for a backend whose devices are skipped anyway (text): the statement gives them no row.
        shapes = [
            (alias, self._template(alias, known, due))
            for alias, known in messages.items()
            if not isinstance(known, str)
        ]
        # No savepoint, as `_insert_locked`: a database error marks the caller's transaction for rollback
        # (a refusal is raised after this block, which leaves the caller's transaction usable).
        with transaction.mark_for_rollback_on_error(using=db):
            rows = locked_insert.read_and_insert(user_id, shapes, db)
        if rows is None:
            return None
        spare = {alias: row for alias, row in shapes if row is not None}
        return self._settle(rows, messages, spare, timing, users, db)

    def _settle(
        self,
        rows: list[tuple[Any, ...]],
        messages: dict[str, Any],
        spare: dict[str, Notification],
        timing: Mapping[Any, tuple[Any, Any, str]],
        users: Mapping[Any, Any],
        db: str,
    ) -> tuple[list[Notification], list["SkippedDevice"]]:
        """From `read_and_insert`'s rows: the rows kept and the devices skipped, as `_plan` and
        `_insert_still_active` would have made them from the same devices. `spare`: the statement's rows
        by alias, each the first planned row of its backend (so one row is made per device, not two)."""
        # Each row: the device's `_DEVICE_COLUMNS`, then what the INSERT returned, its device and its key.
        start, width = len(_DEVICE_COLUMNS), len(insert.returned_fields())
        inserted = {row[start + width]: row[start:] for row in rows if row[start] is not None}  # by device
        try:
            planned, skipped = self._plan([row[:start] for row in rows], timing, messages, spare)
        except ValidationError:
            _delete_rows(db, [values[0] for values in inserted.values()])  # the statement stored none: kept safe
            raise
        if not _as_planned(rows, planned, messages, inserted):
            # The statement's rows are not the planned ones: they go, and the planned ones go in as elsewhere.
            _delete_rows(db, [values[0] for values in inserted.values()])
            return _insert_still_active(planned, users, skipped), skipped
        created = [n for n in planned if n.device_id in inserted]
        for notification in created:
            values = inserted[notification.device_id]
            insert.saved(notification, db, values)
            notification.idempotency_key = values[width + 1]
        skipped += [SkippedDevice(n.device_id, _LEFT_OUT) for n in planned if n.device_id not in inserted]
        if created:
            _request_drain_on_commit(db)
        return created, skipped

    def _configured_messages(self) -> dict[str, Any]:
        """{alias: (backend class, message fields) or why its devices are skipped (text)
        or the ValidationError its backend refuses the message with} for every configured backend.

        Backends that convert the data alike (most do not convert it) get one message between them: the
        fields depend on the backend only through that conversion (`_message_fields`)."""
        made: dict[Any, dict[str, Any] | ValidationError] = {}
        out: dict[str, Any] = {}
        for alias, backend_cls in _configured_backends():
            out[alias] = backend_cls if isinstance(backend_cls, str) else self._message_cached(backend_cls, made)
        return out

    def _message_cached(self, backend_cls: type[PushBackend], made: dict[Any, Any]) -> Any:
        key = getattr(backend_cls, "prepare_data", None)
        if key not in made:
            try:
                made[key] = self._fields(backend_cls)
            except ValidationError as exc:
                made[key] = exc
        return made[key] if isinstance(made[key], ValidationError) else (backend_cls, made[key])

    def _template(self, alias: str, known: Any, due: tuple[Any, Any, str]) -> Notification | None:
        """A row of `alias`'s message and the user's times, without a device (the statement adds it); None
        when the backend refuses the message."""
        if isinstance(known, ValidationError):
            return None
        at, expires_at, deferral = due
        return Notification(
            **known[1], backend=alias, expires_at=expires_at, next_attempt_at=at, last_error=deferral,
            created_at=self.clock.now(),  # the database's clock, as the row's other times
        )  # fmt: skip

    def _timings(self, users: Mapping[Any, Any]) -> tuple[dict[Any, tuple[Any, Any, str]], list["SkippedUser"]]:
        """{user pk: timing} of the users the quiet-hours policy could judge, and the others with why."""
        timing: dict[Any, tuple[Any, Any, str]] = {}
        skipped: list[SkippedUser] = []
        for pk, user in users.items():
            try:
                timing[pk] = self._timing(user)
            except _PolicyFailed as failed:
                log_event(logger, "quiet_hours_error", job="notification", id="-", reason=f"user {pk}: {failed}")
                skipped.append(SkippedUser(pk, f"not sent: {failed}"))
        return timing, skipped

    def _plan(
        self,
        devices: list[tuple[Any, ...]],
        timing: Mapping[Any, tuple[Any, Any, str]],
        known: Mapping[str, Any] | None = None,
        spare: dict[str, Notification] | None = None,
    ) -> tuple[list[Notification], list["SkippedDevice"]]:
        """The unsaved rows for `devices` (rows of `_DEVICE_COLUMNS`) and the devices skipped, with why.
        `known`: messages already built (`_configured_messages`); a refusal there is raised here, at the
        first device on that backend, as building the message there would raise it. `spare`: a row per
        backend to take for its first device instead of a new one (`_template`)."""
        spare = {} if spare is None else spare
        skipped = _over_the_cap(devices)
        over = {d.device_id for d in skipped}
        messages: dict[str, Any] = dict(known or {})
        planned: list[Notification] = []
        for pk, alias, token, _used, _created, user_id in devices:
            if pk in over:
                continue
            if alias not in messages:
                messages[alias] = self._message(alias)
            if isinstance(messages[alias], ValidationError):
                raise messages[alias]
            row = _planned_row(messages[alias], pk, alias, token, timing[user_id], spare.get(alias))
            if row is spare.get(alias):
                del spare[alias]
            if isinstance(row, SkippedDevice):
                skipped.append(row)
            else:
                row.created_at = self.clock.now()  # the database's clock, as the rows' other times
                planned.append(row)
        return planned, skipped

    def _message(self, alias: str) -> tuple[type[PushBackend], dict[str, Any]] | str:
        try:
            backend_cls = _backend_class(alias)
        except ValidationError as exc:
            return f"its backend cannot send: {' '.join(exc.messages)}"
        return backend_cls, self._fields(backend_cls)

    def _fields(self, backend_cls: type[PushBackend]) -> dict[str, Any]:
        return _message_fields(
            backend_cls, title=self.title, body=self.body, data=self.data, collapse_key=self.collapse_key,
            ttl=self.ttl, priority=self.priority, options=self.options,
        )  # fmt: skip

    def _timing(self, user: Any) -> tuple[Any, Any, str]:
        """(due, expires at, deferral reason) for `user`'s rows: quiet hours are the user's own."""
        at, deferral = _quiet_hours(user, self.send_at, self.priority, self.clock)
        due, expires_at = _due_and_expiry(at, self.ttl, self.clock)
        return due, expires_at, deferral


def _over_the_cap(devices: list[tuple[Any, ...]]) -> list["SkippedDevice"]:
    """The devices beyond WEAVE PUSH_MAX_DEVICES_PER_USER of each user; the most recently used ones get it."""
    cap = weave_settings.PUSH_MAX_DEVICES_PER_USER
    by_user: dict[Any, list[tuple[Any, ...]]] = {}
    for device in devices:
        by_user.setdefault(device[5], []).append(device)
    why = f"over WEAVE PUSH_MAX_DEVICES_PER_USER ({cap}) for this user"
    skipped = []
    for mine in by_user.values():
        if len(mine) > cap:
            # Registered before the cap (or before it was lowered).
            recent = sorted(mine, key=lambda d: (d[3] or d[4], d[0]), reverse=True)
            skipped += [SkippedDevice(d[0], why) for d in recent[cap:]]
    return skipped


def _planned_row(
    known: tuple[type[PushBackend], dict[str, Any]] | str,
    pk: Any,
    alias: str,
    token: str,
    timing: tuple[Any, Any, str],
    spare: Notification | None = None,
) -> "Notification | SkippedDevice":
    """The unsaved row for one device, or why the device is skipped. `spare`: a row of the same message and
    `timing` without a device yet, taken instead of a new one."""
    if isinstance(known, str):
        return SkippedDevice(pk, known)
    backend_cls, fields = known
    try:
        canonical = canonical_device_token(token, backend_cls=backend_cls, field="token")
    except ValidationError as exc:
        return SkippedDevice(pk, f"its token cannot be sent: {' '.join(exc.messages)}")
    if problem := backend_cls.target_problem(canonical, fields["options"]):
        return SkippedDevice(pk, problem)  # a Live Activity token and an ordinary alert, say
    if spare is not None:
        spare.device_token, spare.device_id = canonical, pk
        return spare
    due, expires_at, deferral = timing
    return Notification(
        **fields, backend=alias, device_token=canonical, device_id=pk, expires_at=expires_at,
        next_attempt_at=due, last_error=deferral,
    )  # fmt: skip


_LEFT_OUT = "deactivated or registered by another user meanwhile"


def _as_planned(
    rows: list[tuple[Any, ...]], planned: list[Notification], messages: Mapping[str, Any], inserted: Mapping[Any, Any]
) -> bool:
    """Whether the one-statement send's rows (`inserted`, by device) are those planned from the devices it
    read (`rows`): no device beyond the cap got one or was on a backend refusing the message, and no
    token was refused or changed by today's checks."""
    if any(isinstance(messages.get(row[1]), ValidationError) for row in rows):  # beyond the cap: not raised
        return False
    stored_token = {row[0]: row[2] for row in rows}
    return {n.device_id for n in planned}.issuperset(inserted) and all(
        n.device_token == stored_token[n.device_id] for n in planned
    )


def _delete_rows(db: str, keys: list[Any]) -> None:
    """Delete the just-inserted notifications `keys` (in the caller's transaction: no one else saw them)."""
    if keys:
        with transaction.mark_for_rollback_on_error(using=db):
            Notification._base_manager.using(db).filter(pk__in=keys)._raw_delete(db)


def _insert_still_active(
    planned: list[Notification], users: Mapping[Any, Any], skipped: list["SkippedDevice"]
) -> list[Notification]:
    """Insert the rows whose device is still active and still theirs; add the others to `skipped`. Each
    device is locked while its row goes in (see below)."""
    if not planned:
        return []
    db = router.db_for_write(Notification)
    if router.db_for_write(Device) == db:
        created = _insert_locked(planned, users, skipped, db)
        if created is not None:
            return created
    # On SQLite there is neither a row lock nor an INSERT inside a WITH (and the devices may live on
    # another database): the locking read is its own statement right before the INSERT, in one short
    # transaction, and the request is made once, after the commit.
    # No savepoint inside the caller's transaction: nothing below refuses a row (that was `_plan`), so
    # only a database error could end the block early, and it marks the caller's transaction for rollback.
    with transaction.atomic(using=db, savepoint=False):
        # Held only for this short block: a concurrent hand-over or deactivation waits for these rows to
        # commit and then ends them, or commits first and its device is left out here. Locked in key order.
        still = {row[0] for row in _active_device_rows(list(users), locking=True)}
        created = [n for n in planned if n.device_id in still]
        skipped += [SkippedDevice(n.device_id, _LEFT_OUT) for n in planned if n.device_id not in still]
        _insert_many(created)
        if created:
            _request_drain_on_commit(db)
    return created


def _insert_locked(
    planned: list[Notification], users: Mapping[Any, Any], skipped: list["SkippedDevice"], db: str
) -> list[Notification] | None:
    """On PostgreSQL: one statement locks the devices, re-checks them and inserts the rows of those that
    passed (`notifications.locked_insert`); None elsewhere (nothing was run).

    Outside a transaction the statement also claims the drain request and commits by itself: one round
    trip instead of a transaction of its own and a separate request. Inside a caller's transaction the
    claim cannot ride in it (the request row would stay locked until the caller commits, and every
    other sender would wait for it): the request is made once, after the commit, and the device locks
    are held until then, as a locking read's would be."""
    connection = connections[db]
    claim = _drain_claim_in_statement(db, only_if=locked_insert.INSERTED)
    if connection.in_atomic_block or not connection.get_autocommit():
        # No savepoint: nothing here refuses a row (that was `_plan`), and a database error marks the
        # caller's transaction for rollback, as any of its statements would.
        with transaction.atomic(using=db, savepoint=False):
            claimed = locked_insert.insert_locked(planned, users, db, claim=None)
    else:
        claimed = locked_insert.insert_locked(planned, users, db, claim=claim)
    if claimed is None:
        return None
    created = [n for n in planned if not n._state.adding]
    skipped += [SkippedDevice(n.device_id, _LEFT_OUT) for n in planned if n._state.adding]
    if created and claim is not None:
        queue.drain_claimed(claimed[0])  # the rows and the claim committed together: enqueue if it won
    elif created:
        _request_drain_on_commit(db)
    return created


def _active_device_rows(user_ids: list[Any], *, locking: bool) -> list[tuple[Any, ...]]:
    """`_DEVICE_COLUMNS` of the active devices of `user_ids`, by user then key; `locking`: by key, each row
    locked FOR NO KEY UPDATE until the transaction ends (the caller's transaction must be open).

    On PostgreSQL the statement's text is made once per process and takes the users as one array, or one
    user as a plain parameter: a send makes two of these reads, and building and compiling each as a
    queryset would take more of this process's time than the round trip; PostgreSQL plans the one-user
    text once per connection, where it plans the array's again on every run (`locked_insert._locked_sql`
    says why). The columns come back as the ORM would give them there (ints, UUIDs, aware datetimes,
    text); elsewhere the queryset runs as it is."""
    db = router.db_for_write(Device) if locking else router.db_for_read(Device)
    connection = connections[db]
    if connection.vendor != "postgresql":
        rows = Device.objects.using(db).active().filter(user_id__in=user_ids)
        if locking:
            rows = rows.select_for_update(no_key=True).order_by("pk")
        else:
            rows = rows.order_by("user_id", "pk")
        return list(rows.values_list(*_DEVICE_COLUMNS))
    if not user_ids:
        return []
    one_user = len(user_ids) == 1
    sql = _active_devices_sql(db, locking, one_user)
    with statement_cursor(connection, server_bound=True, prepared=True, text=sql) as cursor:
        cursor.execute(sql, [user_ids[0] if one_user else user_ids])
        return [tuple(row) for row in cursor.fetchall()]


@functools.cache
def _active_devices_sql(db: str, locking: bool, one_user: bool) -> str:
    """The PostgreSQL text of `_active_device_rows` (the table and column names are fixed per process)."""
    connection = connections[db]
    qn = connection.ops.quote_name
    meta = Device._meta
    column = {
        f.name: qn(str(f.column))
        for f in meta.concrete_fields
        if f.name in ("id", "backend", "token", "last_used_at", "created_at", "user", "active")
    }
    selected = ", ".join(column[name] for name in ("id", "backend", "token", "last_used_at", "created_at", "user"))
    # In key order when locking, so two sends to the same users take the locks alike and never deadlock.
    order = f"{column['id']} FOR NO KEY UPDATE" if locking else f"{column['user']}, {column['id']}"
    user_type = locked_insert.cast_type(meta.get_field("user"), connection)
    users = f"{column['user']} = %s::{user_type}" if one_user else f"{column['user']} = ANY(%s)"
    return f"SELECT {selected} FROM {qn(meta.db_table)} WHERE {column['active']} AND {users} ORDER BY {order}"


@dataclass(frozen=True)
class SkippedDevice:
    """A device `notification_send_to_user` left out, and why."""

    device_id: Any
    reason: str


@dataclass(frozen=True)
class SkippedUser:
    """A user a fan-out left out entirely (none of their devices got a row), and why."""

    user_id: Any
    reason: str


class UserNotifications(list[Notification]):
    """The notifications `notification_send_to_user` created (a list), the devices it `skipped`, and
    `skipped_users` (the user, when the quiet-hours policy could not judge them)."""

    def __init__(
        self,
        created: Iterable[Notification] = (),
        *,
        skipped: Iterable[SkippedDevice] = (),
        skipped_users: Iterable[SkippedUser] = (),
    ) -> None:
        super().__init__(created)
        self.skipped: list[SkippedDevice] = list(skipped)
        self.skipped_users: list[SkippedUser] = list(skipped_users)


def _insert_many(rows: list[Notification], *, using: str | None = None) -> None:
    """Insert `rows` in as few statements as the database takes, and set their keys and database-clock times.

    `bulk_create` would split the rows into batches of 999 parameters on SQLite (Django 5.2 assumes the
    old compile-time limit), a statement per ~45 rows; the insert below asks the database for its real
    limit, so 5,000 devices are one statement on SQLite as on PostgreSQL.
    """
    if not rows:
        return
    db = using or router.db_for_write(Notification)
    if len(rows) == 1 and insert.insert(rows[0], db) is not None:
        return  # one row (a user with one device): the text made once per process, as `notification_create`
    fields = insert.fields()
    per_statement = max(1, _parameter_limit(db) // (len(fields) + 4))  # + a clock expression's parameters
    if not connections[db].features.can_return_rows_from_bulk_insert:
        per_statement = 1  # an old SQLite: only a one-row INSERT says which key it made
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        returned = Notification._base_manager._insert(  # type: ignore[attr-defined]
            chunk, fields=fields, returning_fields=insert.returned_fields(), using=db
        )
        for row, values in zip(chunk, returned, strict=True):
            insert.saved(row, db, values)


def _parameter_limit(db: str) -> int:
    """How many parameters one statement may carry on `db`."""
    connection = connections[db]
    if connection.vendor == "sqlite":
        import sqlite3

        connection.ensure_connection()
        raw = connection.connection
        if raw is not None and hasattr(raw, "getlimit"):
            return int(raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
        return int(connection.features.max_query_params or 999)
    if connection.vendor == "postgresql" and not connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
        return 10**9  # client-side binding (Django's default): the values are part of the statement's text
    return 65535  # the wire protocol's limit on bound parameters


def notification_send_to_topic(
    *,
    backend: str,
    title: str,
    body: str,
    topic: str | None = None,
    condition: str | None = None,
    data: Mapping[str, Any] | None = None,
    collapse_key: str | None = None,
    ttl: int | None = None,
    priority: str = Notification.Priority.NORMAL,
    options: Mapping[str, Any] | None = None,
    send_at: datetime | None = None,
    clock: Clock = default_clock,
) -> Notification:
    """Create one notification to an FCM `topic` (or a `condition` over topics) on `backend`, with its own receipts.

    The provider fans it out: it is one row, one send and one answer, whoever is subscribed."""
    target = _topic_target(backend=backend, topic=topic, condition=condition)
    with transaction.atomic():
        fields = _notification_fields(
            backend=backend, token=target, title=title, body=body, data=data,
            collapse_key=collapse_key, ttl=ttl, priority=priority, options=options,
        )  # fmt: skip
        return _insert(fields, device=None, ttl=ttl, send_at=_send_at(send_at, clock), clock=clock)


_TOPIC = re.compile(r"[a-zA-Z0-9\-_.~%]{1,900}")
_CONDITION_TOPIC = re.compile(r"'([^']*)' in topics")
_CONDITION_REST = re.compile(r"(\s|&&|\|\||!|\(|\))*")


def _topic_target(*, backend: str, topic: str | None = None, condition: str | None = None) -> str:
    """The stored device_token for a topic or condition send (`topic:news`), checked as FCM checks it."""
    if not getattr(_backend_class(backend), "supports_topics", False):
        raise ValidationError({"backend": f"Backend {backend!r} cannot send to topics (FCM backends can)."})
    if (topic is None) == (condition is None):
        raise ValidationError({"topic": "Give a topic or a condition, not both and not neither."})
    if topic is not None:
        if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
            raise ValidationError({"topic": "A topic name is 1 to 900 of the characters a-z A-Z 0-9 - _ . ~ %."})
        return f"{TOPIC_PREFIX}{topic}"
    if not isinstance(condition, str) or not condition.strip():
        raise ValidationError({"condition": "A condition such as \"'news' in topics && 'sport' in topics\"."})
    names = _CONDITION_TOPIC.findall(condition)
    rest = _CONDITION_TOPIC.sub("", condition)
    well_formed = all(_TOPIC.fullmatch(name) for name in names) and _CONDITION_REST.fullmatch(rest)
    if not names or len(names) > 5 or not well_formed:
        raise ValidationError(
            {"condition": "A condition combines up to five 'name' in topics clauses with &&, || and parentheses."}
        )
    return f"{CONDITION_PREFIX}{condition}"


def notification_check(
    *,
    title: str,
    body: str = "",
    data: Mapping[str, Any] | None = None,
    device_token: str | None = None,
    backend: str | None = None,
    collapse_key: str | None = None,
    ttl: int | None = None,
    priority: str = Notification.Priority.NORMAL,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Raise the `ValidationError` `notification_create` would raise for a raw token; store nothing.

    For callers that must know before their first side effect that a notification they will create
    later is acceptable (onboarding checks its welcome message before any outside call).
    """
    if device_token is None:
        raise ValidationError({"device_token": "A device token (or a device) is required."})
    _notification_fields(
        backend=backend or DEFAULT_ALIAS, token=device_token, title=title, body=body, data=data,
        collapse_key=collapse_key, ttl=None, priority=priority, options=options,
    )  # fmt: skip
    _check_ttl(ttl)


def notification_edit(
    *, notification_id: int, title: str, body: str = "", data: Mapping[str, Any] | None = None
) -> int:
    """Change a notification's title, body and data while no worker has ever claimed it; return the id.

    Checked like `notification_create` against the row's backend and token. One conditional UPDATE
    (pending, fence 0, no owner): a claim that lands first makes it match no row and `ContentLocked`
    is raised, so the record of what was sent never changes afterwards.
    """
    (notification_id,) = check_ids([notification_id], field="notification_id")
    row = Notification.objects.filter(pk=notification_id).values("backend", "device_token", "collapse_key", "priority")
    current = row.first()
    if current is None:
        raise ContentLocked(f"Notification {notification_id} does not exist (any more).")
    fields = _notification_fields(
        backend=current["backend"], token=current["device_token"], title=title, body=body, data=data,
        collapse_key=current["collapse_key"], ttl=None, priority=current["priority"],
    )  # fmt: skip
    changed = Notification.objects.filter(
        pk=notification_id, status=Notification.Status.PENDING, fence=0, owner__isnull=True
    ).update(title=fields["title"], body=fields["body"], data=fields["data"])
    if changed != 1:
        raise ContentLocked(
            f"Notification {notification_id} was already claimed by a worker (or finished): its content "
            "is the record of what was sent and cannot change."
        )
    log_event(logger, "edited", job="notification", id=notification_id)
    return notification_id


def _notification_fields(
    *,
    backend: str,
    token: str,
    title: str,
    body: str,
    data: Mapping[str, Any] | None,
    collapse_key: str | None,
    ttl: int | None,
    priority: str,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate one notification's fields against its backend; return the model fields, or raise ValidationError."""
    # Type and content first (weave.validation): a wrong argument is a ValidationError naming its field,
    # never an AttributeError, DataError or RecursionError later, and nothing is stored.
    if not isinstance(backend, str):
        raise ValidationError({"backend": f"backend must be text, not {type(backend).__name__}."})
    backend_cls = _backend_class(backend)
    if _topical(backend_cls, token):
        # A topic or condition target (never a device's token): checked as FCM checks it, however it came.
        kind, _, target = token.partition(":")
        token = _topic_target(backend=backend, **{kind: target})
    else:
        token = canonical_device_token(token, backend_cls=backend_cls)
    fields = _message_fields(
        backend_cls, title=title, body=body, data=data, collapse_key=collapse_key, ttl=ttl, priority=priority,
        options=options,
    )  # fmt: skip
    if problem := backend_cls.target_problem(token, fields["options"]):
        raise ValidationError({"device_token": f"This message cannot go to this token: {problem}."})
    return {"backend": backend, "device_token": token, **fields}


def _message_fields(
    backend_cls: type[PushBackend],
    *,
    title: str,
    body: str,
    data: Mapping[str, Any] | None,
    collapse_key: str | None,
    ttl: int | None,
    priority: str,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate a message's content for `backend_cls` (the same for every device on it); return the fields.

    It depends on the backend only through `_backend_data`: `_FanOut._configured_messages` builds one
    message for the backends that convert the data alike."""
    title = check_text(title, field="title", max_chars=_field_length("title"))
    body = check_text(body, field="body")
    options = check_options(options)
    # A Live Activity update may change only its content state: no title, no body, no data.
    if not title and (body or not data) and "live_activity" not in options:
        # An alert needs a title; a silent (background) push is data alone, with neither title nor body.
        raise ValidationError({"title": "A title is required. (A silent push has data and neither title nor body.)"})
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ValidationError({"data": f"data must be a JSON object, not {type(data).__name__}."})
    check_json(dict(data), field="data", object_only=True)
    data = check_json(_backend_data(backend_cls, data), field="data", object_only=True)
    if not isinstance(priority, str) or priority not in _PRIORITIES:
        raise ValidationError({"priority": f"priority must be one of {', '.join(Notification.Priority.values)}."})
    collapse_key = check_text(collapse_key or "", field="collapse_key", strip=True, one_line=True)
    if len(collapse_key) > (most := _field_length("collapse_key")) or not collapse_key.isprintable():
        raise ValidationError({"collapse_key": f"A collapse key is at most {most} printable characters."})
    _check_ttl(ttl)
    # Counted as the UTF-8 bytes of the compact JSON actually sent; the token travels in the URL or a header.
    check_payload_size(title=title, body=body, data=data, options=options)
    fields = {"title": title, "body": body, "data": data, "collapse_key": collapse_key, "priority": priority}
    return {**fields, "options": options}


def _check_ttl(ttl: Any) -> None:
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_TTL):
        raise ValidationError({"ttl": f"ttl is a whole number of seconds from 1 to {MAX_TTL} (28 days)."})


def _topical(backend_cls: type[PushBackend], token: Any) -> bool:
    """Whether `token` names a topic or a condition on a backend that sends to them."""
    prefixes = (TOPIC_PREFIX, CONDITION_PREFIX)
    return (
        bool(getattr(backend_cls, "supports_topics", False)) and isinstance(token, str) and token.startswith(prefixes)
    )


def _send_at(value: Any, clock: Clock) -> datetime | None:
    """Check a scheduled send time: an aware datetime within a year of now (`check_send_at`). The row is
    due by the database clock; only this wide bound is judged by `clock.rough_now()`."""
    if value is None:
        return None
    if not isinstance(clock, Clock):
        raise ValidationError({"clock": "clock must be a weave.leases Clock."})
    return check_send_at(value, now=clock.rough_now())


class _PolicyFailed(Exception):
    """The site's quiet-hours policy raised or answered nonsense for one user (its words are the message)."""


def _quiet_hours(user: Any, send_at: datetime | None, priority: str, clock: Clock) -> tuple[datetime | None, str]:
    """Apply the site's quiet-hours policy (`PUSH_QUIET_HOURS`) to a push for `user` due at `send_at` (None: now).

    Return the due time to store and, when the policy deferred it, the reason the row carries. The
    deferral uses no attempt: the row is simply due later, and its story says why. The worker asks the
    policy again when it claims the row (`notifications.quiet`)."""
    policy = quiet_hours_policy()
    if policy is None or user is None:
        return send_at, ""
    at = send_at or clock.read()
    try:
        later = quiet_until(policy, user, at, priority)
    except Exception as exc:  # noqa: BLE001 - site code, guarded as the worker guards it (see notifications.quiet)
        raise _PolicyFailed(policy_failure(exc)) from exc
    if later is None:
        return send_at, ""
    return later, deferral_reason(at, later)


def _due_and_expiry(send_at: datetime | None, ttl: int | None, clock: Clock) -> tuple[Any, Any]:
    """When a new row is due and when it expires: now by the database clock, or its send time; TTL from then."""
    if send_at is None:
        return clock.now(), (clock.now(timedelta(seconds=ttl)) if ttl is not None else None)
    return send_at, (send_at + timedelta(seconds=ttl) if ttl is not None else None)


def _insert(
    fields: dict[str, Any],
    *,
    device: Device | None,
    ttl: int | None,
    clock: Clock,
    send_at: datetime | None = None,
    deferral: str = "",
) -> Notification:
    due, expires_at = _due_and_expiry(send_at, ttl, clock)
    notification = Notification(
        **fields, device=device, expires_at=expires_at, next_attempt_at=due, last_error=deferral,
        created_at=clock.now(),  # the database's clock, as the row's other times
    )  # fmt: skip
    db = router.db_for_write(Notification, instance=notification)
    # The model signals `Notification.objects.create` would send, around the same INSERT; the INSERT
    # returns the key and the database-clock times, so nothing is read back.
    signals.pre_save.send(sender=Notification, instance=notification, raw=False, using=db, update_fields=None)
    claim = _drain_claim_in_statement(db)
    with transaction.mark_for_rollback_on_error(using=db):
        claimed = insert.insert(notification, db, claim=claim)
        if claimed is None:  # only the ORM can build this one (not PostgreSQL, a test's clock)
            _insert_many([notification], using=db)
    signals.post_save.send(
        sender=Notification, instance=notification, created=True, update_fields=None, raw=False, using=db
    )
    if claim is not None and claimed is not None:
        queue.drain_claimed(claimed[0])  # the INSERT and the claim committed together: enqueue if it won
    else:
        _request_drain_on_commit(db)
    return notification


def _drain_claim_in_statement(db: str, *, only_if: str = "TRUE") -> SlotClaimSQL | None:
    """The drain request's slot claim, to go in the INSERT itself, when that INSERT will commit by itself.

    Only outside any transaction (autocommit), on PostgreSQL, on the database the request row lives on:
    there the row and its request then commit together, one round trip and one WAL flush instead of
    two. Inside a caller's transaction the request stays at its commit, once per transaction: claimed in
    the INSERT, the request row's lock would be held until the caller commits, and every other sender
    would wait for it."""
    connection = connections[db]
    if db != DEFAULT_DB_ALIAS or connection.vendor != "postgresql":
        return None
    if connection.in_atomic_block or not connection.get_autocommit():
        return None
    return queue.drain_claim_sql(only_if=only_if)


def _request_drain_on_commit(db: str) -> None:
    """Ask for a drain once this transaction commits (at once outside one), once per transaction."""
    if not _drain_requested_on_commit(db):
        transaction.on_commit(_enqueue_drain, using=db)


def _drain_requested_on_commit(db: str) -> bool:
    """Whether this transaction already asks for a drain when it commits: a bulk send in one transaction
    then asks once, not once per notification (the request is coalesced anyway; this saves the statements)."""
    connection = connections[db]
    if not connection.in_atomic_block:
        return False
    # Django keeps (savepoint ids, callback, robust) per registered callback; read defensively.
    pending = getattr(connection, "run_on_commit", None) or []
    return any(len(entry) > 1 and entry[1] is _enqueue_drain for entry in pending)


_PRIORITIES = frozenset(Notification.Priority.values)  # the enum's `values` builds a new list on every read
MAX_TTL = 28 * 24 * 3600  # FCM's longest TTL; APNs and Web Push services keep messages no longer in practice


@functools.cache
def _configured_backends() -> tuple[tuple[str, "type[PushBackend] | str"], ...]:
    """(alias, backend class or why its devices are skipped) for every configured backend.

    The classes depend on WEAVE alone, so they are found once per configuration rather than on every
    send (each would read the settings, copy every alias's options and import the class again);
    `_forget_configured_backends` drops them whenever WEAVE changes (a test's `settings` fixture does).

    Not for a configuration that cannot be read (PUSH_BACKENDS not a mapping): that raises on every send."""
    found: list[tuple[str, type[PushBackend] | str]] = []
    for alias in backend_configs():
        try:
            found.append((alias, _backend_class(alias)))
        except ValidationError as exc:
            found.append((alias, f"its backend cannot send: {' '.join(exc.messages)}"))
    return tuple(found)


@receiver(setting_changed)
def _forget_configured_backends(*, setting: str, **kwargs: Any) -> None:
    if setting == "WEAVE":
        _configured_backends.cache_clear()


def _backend_class(alias: str) -> type[PushBackend]:
    path = backend_path(alias)
    if path is None:
        known = ", ".join(sorted(backend_configs())) or "none"
        raise ValidationError({"backend": f"No push backend {alias!r} in WEAVE PUSH_BACKENDS (configured: {known})."})
    try:
        return backend_class(path)
    except ImproperlyConfigured as exc:
        raise ValidationError({"backend": str(exc)}) from exc


def _backend_data(backend_cls: type[PushBackend], data: Mapping[str, Any]) -> dict[str, Any]:
    """The data as the backend will send it (FCM: every value a string), converted now, never at send time."""
    prepare = getattr(backend_cls, "prepare_data", None)
    if prepare is None:
        return dict(data)
    try:
        return dict(prepare(data))
    except DataError as exc:
        raise ValidationError({"data": str(exc)}) from exc


# --- devices --------------------------------------------------------------------------------------------


def device_token_canonical(*, backend: str, token: Any) -> str:
    """Return `token` as `device_register` stores it for `backend`; raise `ValidationError` if it would refuse it."""
    backend = check_text(backend, field="backend", required=True, one_line=True, max_chars=50)
    backend_cls = _backend_class(backend)
    if _topical(backend_cls, token):
        # Stored as a device, it would send that user's pushes to everyone on the topic.
        raise ValidationError({"token": "A device token cannot name a topic or a condition."})
    if (
        isinstance(token, str)
        and backend_cls.target_only_prefixes
        and token.strip().startswith(backend_cls.target_only_prefixes)
    ):
        raise ValidationError({"token": "A device token cannot name a broadcast channel."})
    return canonical_device_token(token, backend_cls=backend_cls, field="token")


def device_register(*, user: Any, backend: str, token: str, platform: str = "", clock: Clock = default_clock) -> Device:
    """Register `token` on `backend` for `user` (None: not logged in yet); idempotent.

    The token is stored in its backend's canonical form (docs/devices.md). A known token is re-activated;
    registered by another user than its owner, it moves to `user`, and the previous owner's queued
    notifications end unsent with the reason (rows a worker holds under a live lease are its own to finish).
    At most WEAVE PUSH_MAX_DEVICES_PER_USER active devices per user.
    """
    user = _saved_user(user, field="user", required=False)
    backend = check_text(backend, field="backend", required=True, one_line=True, max_chars=50)
    token = device_token_canonical(backend=backend, token=token)
    platform = check_text(platform, field="platform", max_chars=20)
    if platform not in ("", *Device.Platform.values):
        raise ValidationError({"platform": f"platform must be one of {', '.join(Device.Platform.values)} or empty."})
    if not isinstance(clock, Clock):
        raise ValidationError({"clock": "clock must be a weave.leases Clock."})
    for _ in range(2):  # a concurrent first registration of the same token wins the insert; then we update
        try:
            with transaction.atomic():
                return _register(user=user, backend=backend, token=token, platform=platform, clock=clock)
        except IntegrityError:
            continue
    raise ValidationError({"token": "This token is being registered concurrently; try again."})


def _register(*, user: Any, backend: str, token: str, platform: str, clock: Clock) -> Device:
    device = Device.objects.select_for_update().filter(backend=backend, token=token).first()
    if device is None and (aliases := _backend_class(backend).token_aliases(token)):
        # The same install said differently (a Web Push subscription that now says it takes declarative
        # messages): the device it registered as takes the new spelling.
        device = Device.objects.select_for_update().filter(backend=backend, token__in=aliases).first()
        if device is not None:
            Device.objects.filter(pk=device.pk).update(token=token)
    if device is None:
        _check_device_cap(user, joining=None)
        return Device.objects.create(user=user, backend=backend, token=token, platform=platform)
    new_owner = user.pk if user is not None else None
    # The first login on an install (no owner yet) is not a change of hands: its queued rows were for it.
    handed_over = device.user_id is not None and device.user_id != new_owner
    if handed_over or not device.active:
        _check_device_cap(user, joining=device.pk)
    changes: dict[str, Any] = {
        "user": user, "platform": platform or device.platform, "active": True, "deactivated_at": None,
        "deactivation_reason": "",
    }  # fmt: skip
    if handed_over:
        changes["owner_changed_at"] = clock.now()
    Device.objects.filter(pk=device.pk).update(**changes)
    previous = device.user_id
    device.refresh_from_db()
    if handed_over:
        reason = handed_over_reason(previous_user=previous, new_user=new_owner, at=device.owner_changed_at)
        end_queued_for_device(device_id=device.pk, reason=reason, clock=clock, why="device handed over")
        log_event(logger, "device_handed_over", job="device", id=device.pk, reason=f"from user {previous}")
    return device


def _check_device_cap(user: Any, *, joining: Any) -> None:
    """Refuse one more active device for `user` past WEAVE PUSH_MAX_DEVICES_PER_USER (no cap without a user)."""
    if user is None:
        return
    cap = weave_settings.PUSH_MAX_DEVICES_PER_USER
    active = Device.objects.active().filter(user=user).exclude(pk=joining).count()
    if active >= cap:
        raise ValidationError(
            {
                "user": f"This user already has {active} active devices, the most WEAVE PUSH_MAX_DEVICES_PER_USER "
                f"allows ({cap}); deactivate one first."
            }
        )


def device_deactivate(*, device: Device, reason: str, clock: Clock = default_clock) -> Device:
    """Deactivate `device` (idempotent: the first reason stays) and fail its queued notifications with the reason.

    Rows a worker holds under a live lease are left to it: the worker never sends to an inactive device."""
    if not isinstance(device, Device) or device.pk is None:
        raise ValidationError({"device": f"device must be a saved Device, not {type(device).__name__}."})
    reason = check_text(
        reason, field="reason", required=True, strip=True, one_line=True, max_chars=500,
        required_message="Say why the device is deactivated.",
    )  # fmt: skip
    if not isinstance(clock, Clock):
        raise ValidationError({"clock": "clock must be a weave.leases Clock."})
    with transaction.atomic():
        if not Device.objects.filter(pk=device.pk).exists():
            raise ValidationError({"device": f"Device {device.pk} does not exist (any more)."})
        deactivate_device(device_id=device.pk, reason=reason, clock=clock)
        fail_queued_for_device(device_id=device.pk, clock=clock)
    device.refresh_from_db()
    return device


def _saved_user(user: Any, *, field: str, required: bool) -> Any:
    """Return `user` if it is a saved instance of the user model (or None where allowed); refuse anything else."""
    if user is None:
        if required:
            raise ValidationError({field: "A saved user is required."})
        return None
    model = get_user_model()
    if not isinstance(user, model):
        raise ValidationError({field: f"user must be a {model.__name__} (or None), not {type(user).__name__}."})
    if user.pk is None:
        raise ValidationError({field: "The user must be saved first."})
    return user


def _field_length(name: str) -> int:
    field = Notification._meta.get_field(name)
    assert isinstance(field, models.CharField) and field.max_length is not None  # a bounded text column
    return field.max_length


def _enqueue_drain() -> None:
    queue.enqueue_drain()


@dataclass
class BulkResult:
    """Which notifications an admin action changed, and which it left alone and why."""

    changed: list[int] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)  # held by a worker under a live lease
    skipped: list[int] = field(default_factory=list)  # not in a state the action applies to


def notification_retry_now(
    *, notification_ids: Iterable[int], requested_by: str = "", clock: Clock = default_clock
) -> BulkResult:
    """Make pending or failed notifications due now. Rows a worker holds under a live lease are left alone.

    A failed row starts over with a fresh attempt count; its attempt history is kept.
    """
    ids = check_ids(notification_ids, field="notification_ids")
    requested_by = check_text(requested_by, field="requested_by", max_chars=150, one_line=True)
    who = f" by {requested_by}" if requested_by else ""
    with transaction.atomic():
        pending = _lock_free(ids, Notification.Status.PENDING, clock)
        failed = _lock_free(ids, Notification.Status.FAILED, clock)
        Notification.objects.filter(pk__in=pending).update(next_attempt_at=clock.now())
        Notification.objects.filter(pk__in=failed).update(
            status=Notification.Status.PENDING,
            attempts=0,
            finished_at=None,
            next_attempt_at=clock.now(),
            last_error=f"Retry requested{who}; starting over with a fresh attempt count.",
        )
        if pending or failed:
            transaction.on_commit(_enqueue_drain)
    for pk in [*pending, *failed]:
        log_event(logger, "retry_requested", job="notification", id=pk, reason=f"retry now requested{who}")
    return _sort(ids, set(pending) | set(failed), clock)


def notification_cancel(
    *, notification_ids: Iterable[int], requested_by: str = "", clock: Clock = default_clock
) -> BulkResult:
    """Cancel pending notifications that no worker holds; report busy and finished ones instead of forcing them."""
    ids = check_ids(notification_ids, field="notification_ids")
    requested_by = check_text(requested_by, field="requested_by", max_chars=150, one_line=True)
    who = f" by {requested_by}" if requested_by else ""
    with transaction.atomic():
        pending = _lock_free(ids, Notification.Status.PENDING, clock)
        Notification.objects.filter(pk__in=pending).update(
            status=Notification.Status.CANCELLED, last_error=f"Cancelled{who}.", finished_at=clock.now()
        )
    for pk in pending:
        log_event(logger, "cancelled", job="notification", id=pk, reason=f"cancelled{who}")
    return _sort(ids, set(pending), clock)


def _lock_free(ids: list[int], status: str, clock: Clock) -> list[int]:
    """Lock the rows of `ids` in `status` that nobody holds under a live lease.

    The row locks keep a claim off until commit (a batch claim skips locked rows), so the update
    that follows cannot race a worker; a worker whose lease merely expired is refused by its own guard.
    """
    free = Notification.objects.filter(pk__in=ids, status=status).free_or_expired(clock)
    return list(free.select_for_update(skip_locked=True).values_list("pk", flat=True))


def _sort(ids: list[int], changed: set[int], clock: Clock) -> BulkResult:
    busy = set(Notification.objects.filter(pk__in=ids).live(clock).values_list("pk", flat=True)) - changed
    return BulkResult(changed=sorted(changed), busy=sorted(busy), skipped=sorted(set(ids) - changed - busy))
