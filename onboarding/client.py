"""The supplier-services HTTP client: idempotency keys, and retries with backoff for temporary failures.

Whatever the service sends back is outside text. The client never lets it jam a run:

- One deadline caps connect, send and the whole response (headers and body), however slowly the
  peer trickles bytes: `httpx.Timeout` alone bounds each read, not the request.
- A body is read up to `BODY_CAP` bytes; the rest is dropped, so a huge answer costs no memory.
- A 3xx is never followed (a moved service is a configuration error, not the supplier's fault); a
  2xx that is not a JSON object (an HTML maintenance page) is not success.
- Every piece of the answer kept in a reason or a log line goes through `weave.sanitize`, and the
  strings of a JSON answer are cleaned of what PostgreSQL refuses (NUL, lone surrogates), so a
  poison answer can never make a save fail and the same call repeat forever.
"""

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx

from onboarding.errors import PermanentFailure, TemporaryFailure
from weave.conf import weave_settings
from weave.edge import (
    BODY_CAP,
    HttpClass,
    deadline_transport,
    decode,
    escape_controls,
    http_class,
    is_json_content_type,
    outside_text,
    parse_retry_after,
    safe_url,
    whole_request_deadline,
)
from weave.events import log_event
from weave.jobs import backoff_seconds
from weave.leases import Heartbeat

logger = logging.getLogger("weave.onboarding")

# What a reason quotes of a refused answer.
SNIPPET = 200


# --- what a JSON answer may hold ---------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """Return a decoded JSON value whose strings are safe to store and show: no NUL, lone surrogate or control."""
    if isinstance(value, str):
        return escape_controls(decode(value))
    if isinstance(value, list):
        return [_clean(item) for item in value]
    if isinstance(value, dict):
        return {_clean(key): _clean(item) for key, item in value.items()}
    return value


class _Answer:
    """Status, headers and at most `BODY_CAP` bytes of one response."""

    def __init__(self, status: int, headers: httpx.Headers, body: bytes, dropped: bool) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.dropped = dropped  # the body was longer than the cap; the rest was never read

    def snippet(self, secrets: Iterable[str]) -> str:
        text = outside_text(self.body, secrets=secrets, limit=SNIPPET) if self.body else "(empty body)"
        return text + (f" [body over {BODY_CAP} bytes, rest dropped]" if self.dropped else "")

    def json_object(self) -> tuple[dict[str, Any] | None, str]:
        """Return (the body as a clean JSON object, "") or (None, why it is not one)."""
        content_type = self.headers.get("Content-Type")
        if not is_json_content_type(content_type):
            return None, f"a {outside_text(content_type or 'untyped', limit=60)} answer, not JSON"
        if self.dropped:
            return None, f"a JSON answer over {BODY_CAP} bytes"
        try:
            body = json.loads(self.body)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            return None, "a body that is not valid JSON"
        if not isinstance(body, dict):
            return None, f"a JSON {type(body).__name__}, not an object"
        return _clean(body), ""


class SupplierServices:
    """POST JSON to the supplier services; classify every failure as temporary or permanent."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = (base_url if base_url is not None else weave_settings.SUPPLIER_API_URL).rstrip("/")
        if not self.base_url:
            # A configuration gap, not the supplier's fault: keep the run for a later attempt.
            raise TemporaryFailure("WEAVE SUPPLIER_API_URL is not set: there is no supplier service to call.")
        # A password in the URL is still a password: it never appears in a reason or a log line.
        parts = urlsplit(self.base_url)
        self.secrets = tuple(s for s in (parts.password, parts.username) if s)
        self.shown_url = safe_url(self.base_url)
        self.retries = retries if retries is not None else weave_settings.ONBOARDING_STEP_RETRIES
        self.backoff = backoff if backoff is not None else weave_settings.ONBOARDING_RETRY_BACKOFF
        self.retry_after_max = weave_settings.ONBOARDING_RETRY_AFTER_MAX
        self.timeout = float(timeout if timeout is not None else weave_settings.SUPPLIER_API_TIMEOUT)
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=self.timeout,
            transport=transport if transport is not None else deadline_transport(),
            follow_redirects=False,  # a redirect is reported, never followed (see `post`)
        )
        self._pause = threading.Event()  # never set: waits below are plain timed sleeps

    def close(self) -> None:
        self._client.close()

    def post(
        self,
        path: str,
        payload: dict[str, Any],
        *,
        key: str,
        heartbeat: Heartbeat | None = None,
        log: dict[str, Any] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """POST `payload` with `Idempotency-Key: key`; retry temporary failures, then raise.

        Returns (status, JSON object) for 2xx answers and for 422 business refusals the caller reads.
        Raises `TemporaryFailure` once the retries are spent or at once for a redirect or our own
        credentials refused (systemic: retrying now cannot help), `PermanentFailure` for other 4xx,
        and `LeaseLost` (from the heartbeat) as soon as a renewal has failed: a lost lease wins.
        """
        problem = ""
        asked: float | None = None  # the last Retry-After (capped), handed on with the failure
        for attempt in range(self.retries + 1):
            if heartbeat is not None:
                heartbeat.check()
                if attempt and heartbeat.budget_spent:
                    raise TemporaryFailure(
                        f"{path}: attempt budget spent while retrying; last error: {problem}", retry_after=asked
                    )
            # The shared policy: exponential with jitter, capped like a Retry-After.
            delay = backoff_seconds(attempt + 1, base=self.backoff, cap=self.retry_after_max)
            result, problem, asked = self._try_once(path, payload, key)
            if result is not None:
                return result
            if asked is not None:
                delay = max(delay, asked)
            log_event(
                logger,
                "retry",
                **(log or {"job": "onboarding", "id": None}),
                path=path,
                key=key,
                tries=attempt + 1,
                reason=problem,
            )
            if attempt < self.retries:
                self._pause.wait(delay)
        raise TemporaryFailure(f"{path}: {problem} after {self.retries + 1} tries", retry_after=asked)

    def _try_once(
        self, path: str, payload: dict[str, Any], key: str
    ) -> tuple[tuple[int, dict[str, Any]] | None, str, float | None]:
        """One exchange: (answer, "", None) for an answer the caller reads, or (None, problem, Retry-After)
        for a temporary failure worth retrying; raises for the failures a retry cannot help."""
        try:
            answer = self._send(path, payload, key)
        except httpx.TimeoutException as exc:
            # The service may have done the work; the same key on the retry makes that safe.
            return None, f"timed out: no complete answer within {self.timeout:g} s ({type(exc).__name__})", None
        except httpx.HTTPError as exc:
            return None, f"connection failed ({type(exc).__name__}: {self._outside(str(exc))})", None
        return self._judge(path, answer)

    def _judge(self, path: str, answer: _Answer) -> tuple[tuple[int, dict[str, Any]] | None, str, float | None]:
        kind = http_class(answer.status)
        if kind is HttpClass.SUCCESS or answer.status == 422:
            body, why = answer.json_object()
            if body is not None:
                return (answer.status, body), "", None
            # A maintenance page or a broken answer: the service's trouble, not the supplier's.
            return None, f"HTTP {answer.status} with {why}: {answer.snippet(self.secrets)}", None
        if kind is HttpClass.REDIRECT:
            location = answer.headers.get("Location") or "(no Location header)"
            raise TemporaryFailure(
                f"{path} answered HTTP {answer.status} redirecting to "
                f"{self._outside(safe_url(location))}: redirects are not followed; "
                f"check WEAVE SUPPLIER_API_URL ({self.shown_url})."
            )
        if kind is HttpClass.AUTH:
            raise TemporaryFailure(
                f"{path} refused our credentials (HTTP {answer.status}): "
                f"{answer.snippet(self.secrets)}; check the supplier-services configuration."
            )
        if kind is HttpClass.CLIENT:
            raise PermanentFailure(f"{path} refused the request: HTTP {answer.status} {answer.snippet(self.secrets)}")
        # 5xx, 429, 408, or a status no HTTP service sends
        asked = parse_retry_after(answer.headers.get("Retry-After"), answer.headers.get("Date"))
        return None, f"HTTP {answer.status}", None if asked is None else min(asked, self.retry_after_max)

    def _send(self, path: str, payload: dict[str, Any], key: str) -> _Answer:
        """One request under one deadline; read at most `BODY_CAP` bytes of the body."""
        # identity: a compressed body could expand far past the cap once decoded.
        headers = {"Idempotency-Key": key, "Accept": "application/json", "Accept-Encoding": "identity"}
        with (
            whole_request_deadline(self.timeout),
            self._client.stream("POST", path, json=payload, headers=headers) as response,
        ):
            chunks: list[bytes] = []
            size = 0
            dropped = False
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > BODY_CAP:
                dropped = True  # do not even start reading it
            elif response.is_stream_consumed:  # an in-memory answer (a test transport): already read
                chunks.append(response.content)
                dropped = len(response.content) > BODY_CAP
            else:
                for chunk in response.iter_raw():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > BODY_CAP:
                        dropped = True
                        break
            # Leaving the block unread closes the connection instead of draining the rest.
            body = b"".join(chunks)[:BODY_CAP]
            return _Answer(response.status_code, response.headers, body, dropped)

    def _outside(self, text: str) -> str:
        return outside_text(text, secrets=self.secrets, limit=SNIPPET)
