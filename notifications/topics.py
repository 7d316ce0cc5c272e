"""FCM topic subscriptions as fenced jobs, where the last request per registration and topic wins.

    topic_subscribe(topic="news", devices=user.push_devices.all())
    topic_unsubscribe(topic="news", tokens=[token], backend="fcm")
    topic_list(device=device)                      # what FCM says the device is subscribed to

Each call first records the wish per registration and topic (`TopicIntent`: subscribed or not, and a
version bumped on every wish), then creates jobs of the core's runner (`weave.jobs`, job type
"fcm_topic") that make FCM match the wishes. A job never sends what it was created with: it sends the
wish as it stands when it runs, and marks it applied with one guarded update that matches only when
the version did not move during the call; when it moved, the newer wish is sent again. So a retried
subscribe that runs after a later unsubscribe sends nothing (or the unsubscribe), and a subscribe whose
answer arrives after a later unsubscribe was sent is followed by that unsubscribe once more.

The calls go to FCM's v1 topic-subscription API, one registration per call
(`notifications.backends.fcm_topics`), or to the Instance ID batch API when the backend's
`OPTIONS["topic_api"]` is "iid". A registration FCM calls NOT_FOUND or INVALID_ARGUMENT deactivates
its device, with the reason, in the same guarded transaction as the step's receipt: a worker that lost
its lease mid-call writes neither. 429, 5xx and no answer are retried with backoff.
"""

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import models, transaction
from django.db.models import F

from notifications.backends.base import TokenError
from notifications.backends.fcm_topics import TopicApi, topic_client
from notifications.backends.iid import (
    DEAD_TOKEN_CODES,
    RETRYABLE_CODES,
    IIDRefused,
    IIDTemporary,
    topic_name,
)
from notifications.devices import deactivate_device, fail_queued_for_device
from notifications.models import Device, TopicIntent, TopicSubscription
from notifications.topic_wishes import JOB_TYPE, chunks, record_wishes, topic_api, unsubscribe_registration
from weave.conf import weave_settings
from weave.jobs import JobContext, RetryPolicy
from weave.leases import Clock, default_clock
from weave.models import JobStepReceipt
from weave.operations import Timeline, explain_job, how_many

# Tokens one call of a service may name (a hundred IID batches): a site with more calls again.
MAX_TOKENS_PER_CALL = 100_000
# How often one job sends a registration's wish again because a newer one arrived during the call.
MAX_ROUNDS = 5
ALREADY_APPLIED = "ALREADY_APPLIED"  # the latest wish was applied before this job ran: nothing sent

__all__ = [
    "JOB_TYPE",
    "TopicJobs",
    "TopicLookupError",
    "explain_topic_subscription",
    "topic_list",
    "topic_subscribe",
    "topic_unsubscribe",
    "unsubscribe_registration",
]


class TopicJobs(list[TopicSubscription]):
    """The jobs a topic service created (one per batch), with the devices it left out and why."""

    def __init__(self, created: Iterable[TopicSubscription] = (), *, skipped: dict[Any, str] | None = None) -> None:
        super().__init__(created)
        self.skipped = skipped or {}


class TopicLookupError(Exception):
    """FCM could not say which topics a registration has; `temporary` says whether asking later may help."""

    def __init__(self, detail: str, *, temporary: bool) -> None:
        super().__init__(detail)
        self.temporary = temporary


class TopicRetry(RetryPolicy):
    """The core's backoff, but never sooner than a Retry-After that FCM asked for (within the cap)."""

    def retry_in(self, attempt: int, error: BaseException) -> float | None:
        seconds = super().retry_in(attempt, error)
        asked = getattr(error, "retry_after", None)
        if seconds is None or asked is None:
            return seconds
        return max(seconds, min(float(asked), self.backoff_max))


RETRY = TopicRetry(max_attempts=6, backoff=5.0, backoff_max=600.0)


def topic_subscribe(
    *,
    topic: str,
    devices: Iterable[Device] | None = None,
    tokens: Iterable[str] | None = None,
    backend: str | None = None,
    clock: Clock = default_clock,
) -> TopicJobs:
    """Subscribe FCM `devices` (or raw `tokens` on `backend`) to `topic`: fenced jobs, run after this commits."""
    return _topic_jobs(True, topic=topic, devices=devices, tokens=tokens, backend=backend, clock=clock)


def topic_unsubscribe(
    *,
    topic: str,
    devices: Iterable[Device] | None = None,
    tokens: Iterable[str] | None = None,
    backend: str | None = None,
    clock: Clock = default_clock,
) -> TopicJobs:
    """Unsubscribe FCM `devices` (inactive ones too) or raw `tokens` on `backend` from `topic`, as fenced jobs."""
    return _topic_jobs(False, topic=topic, devices=devices, tokens=tokens, backend=backend, clock=clock)


def topic_list(*, device: Device) -> list[str]:
    """Ask FCM which topics `device` is subscribed to (the v1 API's list, whatever `topic_api` says), sorted.

    Raises `ValidationError` for a device that is not a saved FCM device, `TopicLookupError` when FCM
    gave no usable answer."""
    if not isinstance(device, Device) or device.pk is None:
        raise ValidationError({"device": f"device must be a saved Device, not {type(device).__name__}."})
    _check_backend(device.backend)
    try:
        client = topic_client(device.backend, timeout=weave_settings.PUSH_TIMEOUT, api="v1")
        topics: list[str] = client.topics(device.token)
        return topics
    except IIDTemporary as exc:
        raise TopicLookupError(str(exc), temporary=True) from None
    except IIDRefused as exc:
        raise TopicLookupError(str(exc), temporary=False) from None


def _topic_jobs(
    subscribed: bool,
    *,
    topic: Any,
    devices: Iterable[Device] | None,
    tokens: Iterable[str] | None,
    backend: str | None,
    clock: Clock,
) -> TopicJobs:
    try:
        name = topic_name(topic)
    except ValueError as exc:
        raise ValidationError({"topic": str(exc)}) from None
    if (devices is None) == (tokens is None):
        raise ValidationError({"devices": "Give devices, or tokens (with their backend), not both and not neither."})
    if not isinstance(clock, Clock):
        raise ValidationError({"clock": "clock must be a weave.leases Clock."})
    skipped: dict[Any, str] = {}
    if devices is not None:
        if backend is not None:
            raise ValidationError({"backend": "A device names its own backend; give backend only with tokens."})
        by_backend = _device_tokens(devices, skipped, include_inactive=not subscribed)
    else:
        if backend is None:
            raise ValidationError({"backend": "Raw tokens need the FCM backend alias they belong to."})
        by_backend = {backend: _canonical_tokens(backend, tokens or ())}
    with transaction.atomic():
        jobs = [
            job
            for alias, registrations in by_backend.items()
            for job in record_wishes(alias, name, registrations, subscribed=subscribed, clock=clock)
        ]
    return TopicJobs(jobs, skipped=skipped)


def _check_backend(alias: Any) -> str:
    from notifications.backends import backend_configs
    from notifications.backends.fcm import FCMBackend
    from notifications.backends.registry import backend_class

    configs = backend_configs()
    if not isinstance(alias, str) or alias not in configs:
        raise ValidationError({"backend": f"No push backend {alias!r} is configured in WEAVE PUSH_BACKENDS."})
    try:
        cls = backend_class(configs[alias]["BACKEND"])
    except ImproperlyConfigured as exc:
        raise ValidationError({"backend": str(exc)}) from None
    if not issubclass(cls, FCMBackend):
        raise ValidationError({"backend": f"Backend {alias!r} is not FCM: only FCM devices subscribe to topics."})
    return alias


def _canonical_tokens(alias: Any, tokens: Iterable[str]) -> list[str]:
    """The tokens as FCM takes them, each once, in order; a malformed one is refused by its index."""
    from notifications.backends.fcm import FCMBackend

    _check_backend(alias)
    if isinstance(tokens, str | bytes):
        raise ValidationError({"tokens": "tokens is a list of registration tokens, not one string."})
    seen: dict[str, None] = {}
    for index, token in enumerate(tokens):
        if len(seen) >= MAX_TOKENS_PER_CALL:
            raise ValidationError({"tokens": f"At most {MAX_TOKENS_PER_CALL} tokens per call; call again for more."})
        try:
            seen[FCMBackend.canonical_token(token.strip() if isinstance(token, str) else "")] = None
        except TokenError as exc:
            raise ValidationError({"tokens": f"Token {index}: {exc}"}) from None
    if not seen:
        raise ValidationError({"tokens": "No token to subscribe."})
    return list(seen)


def _device_rows(devices: Iterable[Device]) -> Iterable[tuple[Any, str, str, bool]]:
    if isinstance(devices, models.QuerySet):
        rows: Iterable[tuple[Any, str, str, bool]] = devices.values_list("pk", "backend", "token", "active").iterator()
        return rows
    checked = []
    for device in devices:
        if not isinstance(device, Device) or device.pk is None:
            raise ValidationError({"devices": f"devices must be saved Devices, not {type(device).__name__}."})
        checked.append((device.pk, device.backend, device.token, device.active))
    return checked


def _device_tokens(
    devices: Iterable[Device], skipped: dict[Any, str], *, include_inactive: bool
) -> dict[str, list[str]]:
    """The devices' tokens by backend alias; inactive devices are left out (and named) unless `include_inactive`."""
    by_backend: dict[str, dict[str, None]] = {}
    count = 0
    for pk, alias, token, active in _device_rows(devices):
        if not active and not include_inactive:
            skipped[pk] = "inactive"
            continue
        if alias not in by_backend:
            _check_backend(alias)
        count += token not in by_backend.setdefault(alias, {})
        by_backend[alias][token] = None
        if count > MAX_TOKENS_PER_CALL:
            raise ValidationError({"devices": f"At most {MAX_TOKENS_PER_CALL} devices per call; call again for more."})
    if not by_backend:
        raise ValidationError({"devices": "No active device to subscribe." if not include_inactive else "No device."})
    return {alias: list(tokens) for alias, tokens in by_backend.items()}


# --- the job: one step, "call" -----------------------------------------------------------------------


def call(ctx: JobContext) -> dict[str, Any]:
    """Send each registration's latest wish under a heartbeat; return a code per token and the devices to deactivate."""
    job: TopicSubscription = ctx.job
    client = topic_client(job.backend, timeout=weave_settings.PUSH_TIMEOUT)
    _ensure_wishes(job)
    with ctx.heartbeat() as hb:  # a slow call: the lease is renewed while it runs
        by_token = apply_latest_wishes(client, job.backend, job.topic, job.tokens, clock=ctx.clock)
        hb.check()  # a renewal that failed wins, even if the answer looks fine
    codes = [by_token.get(token, ALREADY_APPLIED) for token in job.tokens]
    again = Counter(code for code in codes if code in RETRYABLE_CODES)
    if again and ctx.attempt < RETRY.max_attempts:
        said = ", ".join(f"{n} {code}" for code, n in again.items())
        raise IIDTemporary(f"FCM answered {said} among {len(codes)} tokens; their latest wishes are sent again.")
    dead = {token: code for token, code in zip(job.tokens, codes, strict=True) if code in DEAD_TOKEN_CODES}
    found = Device.objects.filter(backend=job.backend, token__in=list(dead), active=True).values_list("pk", "token")
    return {"codes": codes, "deactivate": [[pk, dead[token]] for pk, token in found]}


def _ensure_wishes(job: TopicSubscription) -> None:
    """Give a job made before wishes were recorded (an upgrade) the wish it was created with."""
    known = TopicIntent.objects.filter(backend=job.backend, topic=job.topic, registration__in=job.tokens).count()
    if known < len(job.tokens):
        subscribed = job.action == TopicSubscription.Action.SUBSCRIBE
        TopicIntent.objects.bulk_create(
            [
                TopicIntent(backend=job.backend, registration=r, topic=job.topic, subscribed=subscribed)
                for r in job.tokens
            ],
            ignore_conflicts=True,
        )


def apply_latest_wishes(
    client: TopicApi, alias: str, topic: str, registrations: list[str], *, clock: Clock = default_clock
) -> dict[str, str]:
    """Send the latest unapplied wish of each registration, fence it, and send again any that moved meanwhile.

    Return {registration: code}: "" applied, a dead-token code, a retryable code (not applied), or
    ALREADY_APPLIED when the latest wish was applied before (nothing sent)."""
    codes: dict[str, str] = {}
    pending = list(registrations)
    for round_ in range(MAX_ROUNDS):
        # After the first round, `pending` holds registrations whose wish moved while our call was out: our
        # call may have landed after the newer wish was sent (and marked applied), so it is sent again anyway.
        wishes = _wishes(alias, topic, pending, unapplied_only=round_ == 0)
        for registration in pending:
            if registration not in wishes:
                codes.setdefault(registration, ALREADY_APPLIED)
        if not wishes:
            return codes
        answers = client.apply(topic, {r: subscribed for r, (subscribed, _) in wishes.items()})
        pending = _fence(alias, topic, wishes, answers, codes, clock)
        if not pending:
            return codes
    raise IIDTemporary(
        f"The wishes for {how_many(len(pending), 'registration{}')} changed during each of {MAX_ROUNDS} calls; "
        "the latest are sent on the next attempt."
    )


def _wishes(alias: str, topic: str, registrations: list[str], *, unapplied_only: bool) -> dict[str, tuple[bool, int]]:
    wishes: dict[str, tuple[bool, int]] = {}
    for chunk in chunks(registrations):
        found = TopicIntent.objects.filter(backend=alias, topic=topic, registration__in=chunk)
        if unapplied_only:
            found = found.exclude(applied_version=F("version"))
        rows = found.values_list("registration", "subscribed", "version")
        wishes.update((registration, (subscribed, version)) for registration, subscribed, version in rows)
    return wishes


def _fence(
    alias: str,
    topic: str,
    wishes: dict[str, tuple[bool, int]],
    answers: dict[str, str],
    codes: dict[str, str],
    clock: Clock,
) -> list[str]:
    """Mark each answered wish applied if its version is still the one sent; return the registrations that moved."""
    groups: dict[tuple[int, str], list[str]] = defaultdict(list)
    for registration, (_, version) in wishes.items():
        code = answers.get(registration, "INTERNAL")
        if code in RETRYABLE_CODES:
            codes[registration] = code  # not applied: the wish stays pending for the retry
        else:
            groups[(version, code)].append(registration)
    for (version, code), members in groups.items():
        for chunk in chunks(members):
            # The fence: only a wish still at the version that was sent is marked applied.
            TopicIntent.objects.filter(backend=alias, topic=topic, registration__in=chunk, version=version).update(
                applied_version=version, applied_at=clock.now(), last_result=code
            )
    sent = [registration for members in groups.values() for registration in members]
    now: dict[str, int] = {}
    for chunk in chunks(sent):
        now.update(
            TopicIntent.objects.filter(backend=alias, topic=topic, registration__in=chunk).values_list(
                "registration", "version"
            )
        )
    moved = []
    for registration in sent:
        if now.get(registration) == wishes[registration][1]:
            codes[registration] = answers.get(registration, "")
        else:
            moved.append(registration)
    return moved


def settle(ctx: JobContext, result: dict[str, Any]) -> None:
    """Deactivate the devices FCM called dead; runs in the step's guarded transaction, after the guard."""
    job: TopicSubscription = ctx.job
    for device_id, code in result["deactivate"]:
        reason = (
            f"FCM topic {job.action} ({job.topic!r}) answered {code} for its token: "
            "the token is not (or no longer) registered with FCM."
        )
        deactivate_device(device_id=device_id, reason=reason, clock=ctx.clock)
        fail_queued_for_device(device_id=device_id, clock=ctx.clock)


def explain_topic_subscription(pk: int, *, clock: Clock = default_clock) -> Timeline:
    """The core's story of job `pk` (claims, attempts, receipts, holder), with what FCM said per token."""
    t = explain_job(JOB_TYPE, TopicSubscription, pk, clock=clock)
    job = TopicSubscription.objects.get(pk=pk)
    t.title = f"Topic job {pk}: {job} ({job.state})"
    receipt = JobStepReceipt.objects.filter(job_type=JOB_TYPE, job_id=str(pk), epoch=job.epoch, step="call").first()
    if receipt is None or not isinstance(receipt.result, dict):
        return t
    codes = receipt.result.get("codes") or []
    tally = Counter(code or "applied" for code in codes)
    # Applied first, then each other code with its count.
    said = ", ".join(f"{n} {code}" for code, n in sorted(tally.items(), key=lambda kv: (kv[0] != "applied", kv[0])))
    gone = [str(pk) for pk, _ in receipt.result.get("deactivate") or []]
    deactivated = f"; devices deactivated: {', '.join(gone)}" if gone else ""
    api = "IID" if topic_api(job.backend) == "iid" else "FCM"
    t.add(receipt.finished_at, "results", f"{api} answered for {how_many(len(codes), 'token{}')}: {said}{deactivated}")
    t.summary = f"{t.summary} {api}: {said}{deactivated}."
    return t
