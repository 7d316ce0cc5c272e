"""Provider credentials, shared by every worker thread and event loop of a process.

- `GoogleAccessToken`: an OAuth2 access token for an FCM service account (google-auth, honouring the
  file's `token_uri`), refreshed before it expires; one refresh serves every caller.
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
import ssl
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import requests

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
    """The auth endpoint could not be reached or did not answer in time: nothing was sent."""


class _TimedRequest:
    """google-auth's requests transport with our timeout on every call (its own default is 120 s)."""

    def __init__(self, session: "requests.Session", timeout: float) -> None:
        # Imported here, not at the top: only an FCM backend needs google-auth (the [fcm] extra).
        import google.auth.transport.requests

        self._inner = google.auth.transport.requests.Request(session=session)
        self._timeout = timeout

    def __call__(
        self, url: Any, method: Any = "GET", body: Any = None, headers: Any = None, timeout: Any = None, **kwargs: Any
    ) -> Any:
        bounded = min(float(timeout or self._timeout), self._timeout)
        # google-auth's transport is untyped.
        return self._inner(url, method=method, body=body, headers=headers, timeout=bounded, **kwargs)


class GoogleAccessToken:
    """An OAuth2 access token for a service account; thread-safe, refreshed by one caller at a time."""

    def __init__(self, credentials_file: str, *, ca_file: str | None = None, timeout: float = 10.0) -> None:
        import requests
        from google.oauth2 import service_account

        # google-auth reads token_uri from the file and posts its signed assertion there.
        self._credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            credentials_file, scopes=[FCM_SCOPE]
        )
        session = requests.Session()
        if ca_file:
            session.verify = ca_file
            # requests lets REQUESTS_CA_BUNDLE override a session's own `verify`: an explicit CA must win.
            session.trust_env = False
        self._request = _TimedRequest(session, timeout)
        self._lock = threading.Lock()
        self.refreshes = 0  # how many tokens were fetched (tests check that callers share them)

    @property
    def token_uri(self) -> str:
        return str(self._credentials._token_uri)  # noqa: SLF001  (google-auth keeps it private)

    def current(self) -> str | None:
        """Return the cached token if it is still good (google-auth counts a token expiring within ~4 min as stale)."""
        credentials = self._credentials
        return str(credentials.token) if credentials.token and credentials.valid else None

    def get(self, *, refused: str | None = None) -> str:
        """Return a good token, fetching one if needed. With `refused`, replace that token unless another
        caller already has (so N callers refused together cause one refresh, not N)."""
        import google.auth.exceptions

        with self._lock:
            token = self.current()
            if token is not None and token != refused:
                return token
            try:
                self._credentials.refresh(self._request)
            except google.auth.exceptions.RefreshError as exc:
                raise CredentialsRefused(
                    f"the token endpoint {self.token_uri} refused the service account: {exc}"
                ) from None
            except google.auth.exceptions.TransportError as exc:
                raise CredentialsUnreachable(f"the token endpoint {self.token_uri} is unreachable: {exc}") from None
            self.refreshes += 1
            return str(self._credentials.token)

    async def aget(self, *, refused: str | None = None, deadline: float) -> str:
        """`get()` off the event loop, waiting at most `deadline` seconds (the fetch itself is bounded too)."""
        if refused is None and (token := self.current()) is not None:
            return token  # the common case: no thread hop
        try:
            async with asyncio.timeout(max(0.0, deadline)):
                return await asyncio.to_thread(self.get, refused=refused)
        except TimeoutError:
            raise CredentialsUnreachable(f"no access token from {self.token_uri} within {deadline:.1f} s") from None


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
    """VAPID `Authorization` headers, one per push-service origin, re-signed an hour before they expire."""

    def __init__(self, *, private_key_file: str, subject: str, lifetime: int = 12 * 3600) -> None:
        from py_vapid import Vapid02

        self._vapid = Vapid02.from_file(private_key_file)
        self.subject = subject
        self.lifetime = lifetime
        self._lock = threading.Lock()
        self._headers: dict[str, tuple[float, str]] = {}  # origin -> (expires at, header)

    def authorization(self, endpoint: str, *, refused: str | None = None) -> str:
        """Return `vapid t=<JWT>,k=<public key>` for the origin of `endpoint`."""
        parts = urlsplit(endpoint)
        origin = f"{parts.scheme}://{parts.netloc}"
        now = time.time()
        with self._lock:
            cached = self._headers.get(origin)
            if cached is not None and cached[0] - 3600 > now and cached[1] != refused:
                return cached[1]
            expires = int(now) + self.lifetime
            header = str(self._vapid.sign({"sub": self.subject, "aud": origin, "exp": expires})["Authorization"])
            self._headers[origin] = (expires, header)
            return header
