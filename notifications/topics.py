"""FCM topic subscriptions as fenced jobs: `topic_subscribe()` / `topic_unsubscribe()` and the job that calls IID.

    topic_subscribe(topic="news", devices=user.push_devices.all())
    topic_unsubscribe(topic="news", tokens=[token], backend="fcm")

A subscription change is a remote side effect like a send, so it runs as a job of the core's runner
(`weave.jobs`, job type "fcm_topic"): one `TopicSubscription` row per IID batch of at most 1,000
tokens, claimed by the database clock, the call made under a heartbeat, its per-token results kept in
the step's receipt. A token that IID calls NOT_FOUND or INVALID_ARGUMENT deactivates its device, with
the reason, in the same guarded transaction as the receipt: a worker that lost its lease mid-call
writes neither. 429, 5xx and no answer are retried with backoff (a batch applied twice changes nothing).
"""

from collections import Counter
from collections.abc import Iterable
from functools import partial
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import models, transaction

from notifications.backends.base import TokenError
from notifications.backends.iid import (
    DEAD_TOKEN_CODES,
    MAX_TOKENS,
    RETRYABLE_CODES,
    IIDTemporary,
    InstanceIdClient,
    topic_name,
)
from notifications.devices import deactivate_device, fail_queued_for_device
from notifications.models import Device, TopicSubscription
from weave.conf import weave_settings
from weave.jobs import JobContext, RetryPolicy, enqueue_job
from weave.leases import Clock, default_clock
from weave.models import JobStepReceipt
from weave.operations import Timeline, explain_job

JOB_TYPE = "fcm_topic"
# Tokens one call of a service may name (a hundred IID batches): a site with more calls again.
MAX_TOKENS_PER_CALL = 100_000

__all__ = ["JOB_TYPE", "TopicJobs", "explain_topic_subscription", "topic_subscribe", "topic_unsubscribe"]


class TopicJobs(list[TopicSubscription]):
    """The jobs a topic service created (one per IID batch), with the devices it left out and why."""

    def __init__(self, created: Iterable[TopicSubscription] = (), *, skipped: dict[Any, str] | None = None) -> None:
        super().__init__(created)
        self.skipped = skipped or {}


class TopicRetry(RetryPolicy):
    """The core's backoff, but never sooner than a Retry-After that IID asked for (within the cap)."""

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
) -> TopicJobs:
    """Subscribe FCM `devices` (or raw `tokens` on `backend`) to `topic`: fenced jobs, run after this commits."""
    return _topic_jobs(TopicSubscription.Action.SUBSCRIBE, topic=topic, devices=devices, tokens=tokens, backend=backend)


def topic_unsubscribe(
    *,
    topic: str,
    devices: Iterable[Device] | None = None,
    tokens: Iterable[str] | None = None,
    backend: str | None = None,
) -> TopicJobs:
    """Unsubscribe FCM `devices` (or raw `tokens` on `backend`) from `topic`, as fenced jobs."""
    return _topic_jobs(
        TopicSubscription.Action.UNSUBSCRIBE, topic=topic, devices=devices, tokens=tokens, backend=backend
    )


def _topic_jobs(
    action: str, *, topic: Any, devices: Iterable[Device] | None, tokens: Iterable[str] | None, backend: str | None
) -> TopicJobs:
    try:
        name = topic_name(topic)
    except ValueError as exc:
        raise ValidationError({"topic": str(exc)}) from None
    if (devices is None) == (tokens is None):
        raise ValidationError({"devices": "Give devices, or tokens (with their backend), not both and not neither."})
    skipped: dict[Any, str] = {}
    if devices is not None:
        if backend is not None:
            raise ValidationError({"backend": "A device names its own backend; give backend only with tokens."})
        by_backend = _device_tokens(devices, skipped)
    else:
        if backend is None:
            raise ValidationError({"backend": "Raw tokens need the FCM backend alias they belong to."})
        by_backend = {backend: _canonical_tokens(backend, tokens or ())}
    jobs = [
        TopicSubscription(backend=alias, topic=name, action=action, tokens=batch[start : start + MAX_TOKENS])
        for alias, batch in by_backend.items()
        for start in range(0, len(batch), MAX_TOKENS)
    ]
    with transaction.atomic():
        TopicSubscription.objects.bulk_create(jobs)
        for job in jobs:
            transaction.on_commit(partial(enqueue_job, JOB_TYPE, job.pk))
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
            seen[FCMBackend.canonical_token(token if isinstance(token, str) else "")] = None
        except TokenError as exc:
            raise ValidationError({"tokens": f"Token {index}: {exc}"}) from None
    if not seen:
        raise ValidationError({"tokens": "No token to subscribe."})
    return list(seen)


def _device_tokens(devices: Iterable[Device], skipped: dict[Any, str]) -> dict[str, list[str]]:
    """The active devices' tokens by backend alias; inactive devices are left out and named in `skipped`."""
    if isinstance(devices, models.QuerySet):
        rows: Iterable[tuple[Any, str, str, bool]] = devices.values_list("pk", "backend", "token", "active").iterator()
    else:
        rows = []
        for device in devices:
            if not isinstance(device, Device) or device.pk is None:
                raise ValidationError({"devices": f"devices must be saved Devices, not {type(device).__name__}."})
            rows.append((device.pk, device.backend, device.token, device.active))
    by_backend: dict[str, dict[str, None]] = {}
    count = 0
    for pk, alias, token, active in rows:
        if not active:
            skipped[pk] = "inactive"
            continue
        if alias not in by_backend:
            _check_backend(alias)
        count += token not in by_backend.setdefault(alias, {})
        by_backend[alias][token] = None
        if count > MAX_TOKENS_PER_CALL:
            raise ValidationError({"devices": f"At most {MAX_TOKENS_PER_CALL} devices per call; call again for more."})
    if not by_backend:
        raise ValidationError({"devices": "No active device to subscribe."})
    return {alias: list(tokens) for alias, tokens in by_backend.items()}


# --- the job: one step, "call" -----------------------------------------------------------------------


def call(ctx: JobContext) -> dict[str, Any]:
    """Make the IID batch call under a heartbeat; return one code per token and the devices to deactivate."""
    job: TopicSubscription = ctx.job
    client = InstanceIdClient.for_backend(job.backend, timeout=weave_settings.PUSH_TIMEOUT)
    with ctx.heartbeat() as hb:  # a slow call: the lease is renewed while it runs
        codes = client.batch(job.action, job.topic, job.tokens)
        hb.check()  # a renewal that failed wins, even if the answer looks fine
    again = Counter(code for code in codes if code in RETRYABLE_CODES)
    if again and ctx.attempt < RETRY.max_attempts:
        said = ", ".join(f"{n} {code}" for code, n in again.items())
        raise IIDTemporary(f"IID answered {said} among {len(codes)} tokens; the batch is sent again (idempotent).")
    dead = {token: code for token, code in zip(job.tokens, codes, strict=True) if code in DEAD_TOKEN_CODES}
    found = Device.objects.filter(backend=job.backend, token__in=list(dead), active=True).values_list("pk", "token")
    return {"codes": codes, "deactivate": [[pk, dead[token]] for pk, token in found]}


def settle(ctx: JobContext, result: dict[str, Any]) -> None:
    """Deactivate the devices IID called dead; runs in the step's guarded transaction, after the guard."""
    job: TopicSubscription = ctx.job
    for device_id, code in result["deactivate"]:
        reason = (
            f"FCM topic {job.action} ({job.topic!r}) answered {code} for its token: "
            "the token is not (or no longer) registered with FCM."
        )
        deactivate_device(device_id=device_id, reason=reason, clock=ctx.clock)
        fail_queued_for_device(device_id=device_id, clock=ctx.clock)


def explain_topic_subscription(pk: int, *, clock: Clock = default_clock) -> Timeline:
    """The core's story of job `pk` (claims, attempts, receipts, holder), with what IID said per token."""
    t = explain_job(JOB_TYPE, TopicSubscription, pk, clock=clock)
    job = TopicSubscription.objects.get(pk=pk)
    t.title = f"Topic job {pk}: {job} ({job.state})"
    receipt = JobStepReceipt.objects.filter(job_type=JOB_TYPE, job_id=str(pk), epoch=job.epoch, step="call").first()
    if receipt is None or not isinstance(receipt.result, dict):
        return t
    codes = receipt.result.get("codes") or []
    tally = Counter(code or "applied" for code in codes)
    # Applied first, then each error code with its count.
    said = ", ".join(f"{n} {code}" for code, n in sorted(tally.items(), key=lambda kv: (kv[0] != "applied", kv[0])))
    gone = [str(pk) for pk, _ in receipt.result.get("deactivate") or []]
    deactivated = f"; devices deactivated: {', '.join(gone)}" if gone else ""
    t.add(receipt.finished_at, "results", f"IID answered for {len(codes)} token(s): {said}{deactivated}")
    t.summary = f"{t.summary} IID: {said}{deactivated}."
    return t
