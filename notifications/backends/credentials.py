"""Provider credentials, shared by every worker thread and event loop of a process.

- `GoogleAccessToken`: an OAuth2 access token for an FCM service account (the JWT-bearer grant of
  RFC 7523, posted to the file's `token_uri`), refreshed before it expires; one fetch at a time serves
  every caller, and what the token endpoint did decides between an outage and a refusal.
- `APNsProviderToken`: an ES256 provider JWT (PyJWT), reused for `lifetime` seconds (Apple accepts
  20 to 60 minutes and refuses a new token more often than every 20), replaced early only when APNs
  says the one we sent is expired or invalid.
- `VapidSigner`: VAPID (RFC 8292) authorization headers per push-service origin (py-vapid), re-signed
  before their `exp`.

Backend instances live for one drain on one event loop; these objects live in a process-wide cache
(`shared()`), so a token is not fetched again per drain, and Apple's refresh limit is respected.
None of them ever puts a secret into an exception message or a log line.
"""

import asyncio
import concurrent.futures
import json
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from weave.edge import outside_text, parse_retry_after, safe_url

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"

T = TypeVar("T")
_shared: dict[Hashable, Any] = {}
_shared_lock = threading.Lock()


def shared(key: Hashable, factory: Callable[[], T]) -> T:
    """Return the process-wide object for `key`, made once by `factory`."""
    with _shared_lock:
        if key not in _shared:
            _shared[key] = factory()
        return _shared[key]  # type: ignore[no-any-return]


def forget_shared() -> None:
    """Drop every cached credential (tests that generate new keys under the same paths)."""
    with _shared_lock:
        _shared.clear()


def tls_context(ca_file: str | None) -> ssl.SSLContext | bool:
    """Return what httpx's `verify` takes: the system trust store, or only the CA in `ca_file` (local fakes)."""
    if not ca_file:
        return True
    return ssl.create_default_context(cafile=ca_file)


class CredentialsRefused(Exception):
    """The provider's auth endpoint refused our credentials: a configuration problem, not this message's."""


class CredentialsUnreachable(Exception):
    """No token to be had right now (the endpoint is down, slow, or answered garbage): nothing was sent.

    `retry_after` is what the endpoint asked for (429/503 with Retry-After), or None.
    """

    def __init__(self, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class GoogleAccessToken:
    """An OAuth2 access token for a service account (RFC 7523 JWT-bearer grant), shared process-wide.

    - Single flight: one fetch at a time serves every caller on every thread and event loop; the
      others wait for it, each under its own deadline (`aget`), never queued behind a lock.
    - A token is kept until `expires_in` minus a margin, but at least `floor` seconds: an endpoint
      that hands out 0 or 60 second tokens does not cost one fetch per message. A token the provider
      refuses (401) is replaced on the next call that names it as refused.
    - A failed fetch is remembered for `failure_ttl` seconds (or the endpoint's Retry-After, within
      reason), so a dead endpoint is asked once per that time, not once per message.
    - What the endpoint did decides the exception: 5xx, 429, timeouts, unreachable, and answers that
      are not a token (HTML, non-JSON, no access_token) raise `CredentialsUnreachable`; 4xx (an
      unknown or disabled service account, a bad signature) raise `CredentialsRefused`.
    """

    MARGIN = 60.0  # refresh this long before the token's stated expiry
    FLOOR = 300.0  # ...but keep every token at least this long (or until refused)
    FAILURE_TTL = 5.0
    MAX_FAILURE_TTL = 60.0

    def __init__(self, credentials_file: str, *, ca_file: str | None = None, timeout: float = 10.0) -> None:
        info = json.loads(Path(credentials_file).read_text(encoding="utf-8"))
        self.client_email = str(info["client_email"])
        self._private_key = str(info["private_key"])
        self._loaded_key: Any = None  # parsed on the first fetch (`_signing_key`)
        self._key_id = str(info.get("private_key_id") or "")
        self._token_uri = str(info.get("token_uri") or GOOGLE_TOKEN_URI)
        self._verify: ssl.SSLContext | bool = tls_context(ca_file)
        self._timeout = timeout
        self.floor = self.FLOOR
        self.failure_ttl = self.FAILURE_TTL
        self._lock = threading.Lock()
        self._token: str | None = None
        self._good_until = 0.0  # time.monotonic()
        self._failure: tuple[float, Exception] | None = None  # (until, what it raised)
        self._inflight: concurrent.futures.Future[str] | None = None
        self.refreshes = 0  # tokens fetched (tests check that callers share them)
        self.fetches = 0  # fetches started, failed ones included

    @property
    def token_uri(self) -> str:
        return self._token_uri

    def current(self) -> str | None:
        """Return the cached token while it is good, else None."""
        with self._lock:
            return self._token if self._token and time.monotonic() < self._good_until else None

    def prefetch(self) -> None:
        """Start a fetch unless a good token is in hand, one is in flight or a failure is being held; never wait."""
        self._flight(None)

    def get(self, *, refused: str | None = None) -> str:
        """Return a good token, fetching one if needed (blocking; bounded by the fetch's timeout)."""
        return self._flight(refused).result(timeout=self._timeout + 1.0)

    async def aget(self, *, refused: str | None = None, deadline: float) -> str:
        """Return a good token, waiting at most `deadline` seconds for the one fetch in flight.

        With `refused`, that token is replaced unless another caller already has (so N callers
        refused together cause one fetch, not N).
        """
        if refused is None and (token := self.current()) is not None:
            return token  # the common case: no thread hop, no lock wait
        flight = self._flight(refused)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[str] = loop.create_future()
        flight.add_done_callback(lambda done: loop.call_soon_threadsafe(_settle, waiter, done))
        try:
            async with asyncio.timeout(max(0.0, deadline)):
                return await waiter
        except TimeoutError:
            raise CredentialsUnreachable(
                f"no access token from the token endpoint {self.token_uri} within {max(0.0, deadline):.1f} s "
                "(it is slow or not answering)"
            ) from None

    def _flight(self, refused: str | None) -> "concurrent.futures.Future[str]":
        """The fetch that will answer this caller: a finished one for a good token, else the one in flight."""
        with self._lock:
            now = time.monotonic()
            if self._token and now < self._good_until and self._token != refused:
                return _done(self._token)
            if self._failure is not None and now < self._failure[0] and refused is None:
                return _done(exception=self._failure[1])
            if self._inflight is None:
                self._inflight = concurrent.futures.Future()
                self.fetches += 1
                threading.Thread(
                    target=self._fetch, args=(self._inflight,), name="weave-fcm-token", daemon=True
                ).start()
            return self._inflight

    def _fetch(self, flight: "concurrent.futures.Future[str]") -> None:
        try:
            token, lifetime = self._request_token()
        except (CredentialsRefused, CredentialsUnreachable) as exc:
            remembered = getattr(exc, "retry_after", None) or self.failure_ttl
            with self._lock:
                self._failure = (time.monotonic() + min(self.MAX_FAILURE_TTL, remembered), exc)
                self._inflight = None
            flight.set_exception(exc)
            return
        with self._lock:
            self._token, self._failure, self._inflight = token, None, None
            self._good_until = time.monotonic() + max(self.floor, lifetime - self.MARGIN)
            self.refreshes += 1
        flight.set_result(token)

    def _assertion(self) -> str:
        import jwt  # the [fcm] extra (PyJWT with cryptography signs the grant)

        now = int(time.time())
        claims = {"iss": self.client_email, "scope": FCM_SCOPE, "aud": self.token_uri, "iat": now, "exp": now + 3600}
        headers = {"kid": self._key_id} if self._key_id else None
        try:
            return jwt.encode(claims, self._signing_key(), algorithm="RS256", headers=headers)
        except (ValueError, TypeError, jwt.PyJWTError) as exc:
            raise CredentialsRefused(
                f"the service account's private_key cannot sign a token request ({type(exc).__name__})"
            ) from None

    def _signing_key(self) -> Any:
        """The service account's key, loaded once: parsing a PEM checks the RSA key, which costs more CPU than
        signing with it. Only the fetch thread calls this (single flight), so no lock."""
        if self._loaded_key is None:
            from cryptography.exceptions import UnsupportedAlgorithm
            from cryptography.hazmat.primitives.serialization import load_pem_private_key

            try:
                self._loaded_key = load_pem_private_key(self._private_key.encode(), password=None)
            except UnsupportedAlgorithm as exc:
                raise ValueError("not a key this library can load") from exc
        return self._loaded_key

    def _request_token(self) -> tuple[str, float]:
        """POST the signed grant to the token endpoint; return (token, lifetime seconds) or raise.

        Runs on the fetch's own thread and event loop, so one `asyncio.timeout` bounds the whole
        exchange (httpx's timeouts bound each read: a trickled answer would outlive them).
        """
        assertion = self._assertion()
        where = f"the token endpoint {safe_url(self.token_uri)}"
        try:
            status, headers, body = asyncio.run(self._post(assertion))
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise CredentialsUnreachable(
                f"{where} did not answer within {self._timeout:g} s ({type(exc).__name__})"
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            said = outside_text(str(exc), secrets=[assertion], limit=200)
            raise CredentialsUnreachable(f"{where} is unreachable ({type(exc).__name__}: {said})") from None
        return _read_token(status, headers, body, where=where, secrets=[assertion])

    async def _post(self, assertion: str) -> tuple[int, httpx.Headers, bytes]:
        form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        async with (
            asyncio.timeout(self._timeout),
            httpx.AsyncClient(verify=self._verify, timeout=self._timeout, follow_redirects=False) as client,
            client.stream("POST", self.token_uri, data=form, headers=headers) as response,
        ):
            body = b""
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > TOKEN_BODY_CAP:
                    break  # a token is small: the rest is not worth reading
            return response.status_code, response.headers, body


GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"
TOKEN_BODY_CAP = 16 * 1024


def _read_token(
    status: int, headers: httpx.Headers, body: bytes, *, where: str, secrets: list[str]
) -> tuple[str, float]:
    """Classify a token endpoint's answer: (token, lifetime), or the exception that says what it did."""
    said = outside_text(body.strip(), secrets=secrets, limit=200) or "an empty body"
    kind = headers.get("content-type", "no content type").split(";")[0]
    if status >= 500 or status == 429:
        retry_after = parse_retry_after(headers.get("retry-after"), headers.get("date"))
        raise CredentialsUnreachable(f"{where} failed with HTTP {status}: {said}", retry_after=retry_after)
    if status >= 300:
        try:
            error = json.loads(body)
            said = outside_text(f"{error.get('error', '')}: {error.get('error_description', '')}", secrets=secrets)
        except (ValueError, AttributeError):
            pass
        raise CredentialsRefused(f"{where} refused the service account (HTTP {status}): {said}")
    try:
        answer = json.loads(body)
        token = answer["access_token"]
        expires_in = float(answer.get("expires_in", 3600))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CredentialsUnreachable(
            f"{where} answered HTTP {status} with {kind} that is not a token: {said}"
        ) from None
    if not isinstance(token, str) or not token or any(c in token for c in "\r\n\x00 "):
        raise CredentialsUnreachable(f"{where} answered HTTP {status} without a usable access_token")
    return token, max(0.0, expires_in)


def _done(result: str | None = None, *, exception: Exception | None = None) -> "concurrent.futures.Future[str]":
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    if exception is not None:
        future.set_exception(exception)
    else:
        assert result is not None
        future.set_result(result)
    return future


def _settle(waiter: "asyncio.Future[str]", flight: "concurrent.futures.Future[str]") -> None:
    """Copy a finished fetch into one caller's future, unless that caller stopped waiting."""
    if waiter.done():
        return
    exc = flight.exception()
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(flight.result())


class APNsProviderToken:
    """An ES256 JWT for APNs token auth, reused for `lifetime` seconds (clamped to Apple's 20-50 minutes)."""

    MIN_LIFETIME = 20 * 60
    MAX_LIFETIME = 50 * 60

    def __init__(self, *, team_id: str, key_id: str, key_file: str, lifetime: float = 40 * 60) -> None:
        self.team_id = team_id
        self.key_id = key_id
        self._key = Path(key_file).read_bytes()
        self.lifetime = min(self.MAX_LIFETIME, max(self.MIN_LIFETIME, lifetime))
        self._lock = threading.Lock()
        self._token = ""
        self._made = 0.0  # time.monotonic() when the token was signed
        self.refreshes = 0

    def get(self, *, refused: str | None = None) -> str:
        """Return the current token, signing a new one when it is older than `lifetime` or was `refused`."""
        import jwt  # the [apns] extra

        with self._lock:
            fresh = self._token and time.monotonic() - self._made < self.lifetime
            if fresh and self._token != refused:
                return self._token
            if refused is not None and self._token != refused and self._token:
                return self._token  # someone already replaced the refused token
            # `iat` on the wall clock: APNs judges the age against its own clock.
            self._token = jwt.encode(
                {"iss": self.team_id, "iat": int(time.time())},
                self._key,
                algorithm="ES256",
                headers={"kid": self.key_id},
            )
            self._made = time.monotonic()
            self.refreshes += 1
            return self._token

    def secret(self) -> str:
        return self._token


class VapidSigner:
    """VAPID `Authorization` headers, one per push-service origin, re-signed an hour before they expire.

    Origins come from users' subscriptions, so the cache is bounded: at most `max_origins` headers
    are kept, the least recently used dropped first (signed again when it is next needed).
    """

    MAX_ORIGINS = 1024

    def __init__(
        self, *, private_key_file: str, subject: str, lifetime: int = 12 * 3600, max_origins: int = MAX_ORIGINS
    ) -> None:
        from py_vapid import Vapid02  # the [webpush] extra

        self._vapid = Vapid02.from_file(private_key_file)
        self.subject = subject
        self.lifetime = lifetime
        self.max_origins = max(1, max_origins)
        self._lock = threading.Lock()
        self._headers: OrderedDict[str, tuple[float, str]] = OrderedDict()  # origin -> (expires at, header)

    def authorization(self, endpoint: str, *, refused: str | None = None) -> str:
        """Return `vapid t=<JWT>,k=<public key>` for the origin of `endpoint`."""
        parts = urlsplit(endpoint)
        origin = f"{parts.scheme}://{parts.netloc}"
        now = time.time()
        with self._lock:
            cached = self._headers.get(origin)
            if cached is not None and cached[0] - 3600 > now and cached[1] != refused:
                self._headers.move_to_end(origin)
                return cached[1]
            expires = int(now) + self.lifetime
            header = str(self._vapid.sign({"sub": self.subject, "aud": origin, "exp": expires})["Authorization"])
            self._headers[origin] = (expires, header)
            self._headers.move_to_end(origin)
            while len(self._headers) > self.max_origins:
                self._headers.popitem(last=False)
            return header

    def cached_origins(self) -> int:
        with self._lock:
            return len(self._headers)
