"""The supplier-services HTTP client: idempotency keys, and retries with backoff for temporary failures."""

import logging
import threading
from typing import Any

import httpx

from onboarding.errors import PermanentFailure, TemporaryFailure
from weave.conf import weave_settings
from weave.events import log_event
from weave.leases import Heartbeat
from weave.retry import backoff_seconds, parse_retry_after

logger = logging.getLogger("weave.onboarding")

# 408 and 425 are "try again" answers too; every other 4xx means the request itself is wrong.
_TEMPORARY_4XX = {408, 425, 429}


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
        self.retries = retries if retries is not None else weave_settings.ONBOARDING_STEP_RETRIES
        self.backoff = backoff if backoff is not None else weave_settings.ONBOARDING_RETRY_BACKOFF
        self.retry_after_max = weave_settings.ONBOARDING_RETRY_AFTER_MAX
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=timeout if timeout is not None else weave_settings.SUPPLIER_API_TIMEOUT,
            transport=transport,
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

        Returns (status, JSON body) for 2xx answers and for 422 business refusals the caller reads.
        Raises `TemporaryFailure` once the retries are spent, `PermanentFailure` for other 4xx, and
        `LeaseLost` (from the heartbeat) as soon as a renewal has failed: a lost lease wins.
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
            # The shared policy (weave.retry): exponential with jitter, capped like a Retry-After.
            delay = backoff_seconds(attempt + 1, base=self.backoff, cap=self.retry_after_max)
            asked = None
            try:
                response = self._client.post(path, json=payload, headers={"Idempotency-Key": key})
            except httpx.TimeoutException as exc:
                # The service may have done the work; the same key on the retry makes that safe.
                problem = f"timed out ({type(exc).__name__})"
            except httpx.TransportError as exc:
                problem = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                status = response.status_code
                if status < 300 or status == 422:
                    return status, self._json(path, response)
                if status >= 500 or status in _TEMPORARY_4XX:
                    problem = f"HTTP {status}"
                    asked = parse_retry_after(response.headers.get("Retry-After"), response.headers.get("Date"))
                    if asked is not None:
                        asked = min(asked, self.retry_after_max)
                        delay = max(delay, asked)
                else:
                    raise PermanentFailure(f"{path} refused the request: HTTP {status} {response.text[:200]}")
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

    @staticmethod
    def _json(path: str, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError as exc:
            raise PermanentFailure(f"{path} answered HTTP {response.status_code} without JSON") from exc
        if not isinstance(body, dict):
            raise PermanentFailure(f"{path} answered HTTP {response.status_code} with a non-object body")
        return body
