"""Where a Web Push request may go: the destination policy for endpoints that end users choose.

A Web Push endpoint is a URL handed over by a browser, so by whoever controls that browser. Posting
to it with the site's VAPID signature is a server-side request on the user's behalf, and it must not
reach anything inside the site's network. The policy (docs/devices.md):

- `https://` only, no userinfo, no fragment, port 443, nothing a URL parser could read two ways;
- the host is a DNS name, never an IP literal in any spelling (`127.0.0.1`, `0x7f000001`,
  `2130706433`, `[::1]`), and never a special-use name (`localhost`, `*.internal`, ...);
- the host is one of WEAVE `PUSH_WEBPUSH_HOSTS` (the known push services by default) or
  `PUSH_WEBPUSH_EXTRA_HOSTS`;
- at connect time, every address the name resolves to is public: not private, loopback, link-local,
  multicast, reserved, unspecified, shared (CGNAT), nor an IPv6 form that embeds such an IPv4 address
  (mapped, 6to4, NAT64, Teredo). The connection goes to one of the addresses just checked, so a name
  that resolves differently a moment later (DNS rebinding) cannot slip past; TLS still verifies the
  certificate against the host name.

`check_endpoint()` is the part without DNS: registration and each send run it. `GuardedTransport`
is the part with DNS, in the Web Push backend's HTTP client. Redirects are never followed by any push
client (`notifications.backends.http`).

WEAVE `PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK` (off by default) lets local fakes on 127.0.0.1 through, for
tests and the demo only; answers from such an origin are never stored verbatim (`is_known_host`).
"""

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from notifications.backends.tls import client_context
from weave.conf import weave_settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]  # host, port -> address texts

ENDPOINT_MAX = 1024  # characters; real endpoints are under 600
DEFAULT_PORT = 443

# Names that never resolve to a public service (RFC 6761, RFC 8375, ICANN's .internal, common LAN suffixes).
SPECIAL_USE_SUFFIXES = (
    "localhost", "local", "internal", "home.arpa", "arpa", "localdomain", "lan", "intranet",
    "test", "invalid", "example", "onion", "alt",
)  # fmt: skip

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_TLD = re.compile(r"[a-z]{2,63}|xn--[a-z0-9-]{1,59}")
# What an endpoint may contain, whole: a browser's endpoint is plain ASCII. No backslash, no "@", no "#",
# no whitespace: each of them is read differently by some URL parser.
_ENDPOINT = re.compile(
    r"https://(?P<host>[a-z0-9.\-]+)(?::(?P<port>[0-9]{1,5}))?(?P<rest>[/?][A-Za-z0-9\-._~!$&'()*+,;=:%/?]*)?"
)

# The policy is these lists, never Python's `is_global` / `is_private`: those follow IANA's registries as
# each Python release reads them (3.13 calls every 6to4 address private, and ORCHIDv2 global), so a
# destination would pass or fail with the interpreter. IPv4: every block IANA marks not globally reachable.
_REFUSED_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    )
)  # fmt: skip
_REFUSED_V6 = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::/96", "::ffff:0:0:0/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
        "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    )
)  # fmt: skip
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# IPv6: only global unicast (RFC 4291) less the blocks above (2001::/23 whole, Teredo and ORCHIDv2 in it)...
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
# ... or a form that stands for the IPv4 address it carries, judged by that address (6to4 is in 2000::/3).
_CARRIERS_V6 = (ipaddress.IPv6Network("::ffff:0:0/96"), _NAT64)


class DestinationRefused(ValueError):
    """The endpoint, or an address its host resolves to, is outside the destination policy."""


@dataclass(frozen=True)
class Endpoint:
    """An endpoint that passed the policy: its canonical URL, host and port."""

    url: str
    host: str
    port: int
    loopback: bool  # let through only by PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK


def check_endpoint(url: Any) -> Endpoint:
    """Return the endpoint in canonical form (lower-case scheme and host), or raise `DestinationRefused`.

    No DNS here: the addresses are checked when a connection is opened (`GuardedTransport`)."""
    if not isinstance(url, str):
        raise DestinationRefused(f"The endpoint must be text, not {type(url).__name__}.")
    if len(url) > ENDPOINT_MAX:
        raise DestinationRefused(f"The endpoint has at most {ENDPOINT_MAX} characters.")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "https":
        raise DestinationRefused("The endpoint must be an https:// URL.")
    lowered = "https://" + _lower_authority(rest)
    loopback = _loopback_endpoint(lowered)
    if loopback is not None:
        return loopback
    match = _ENDPOINT.fullmatch(lowered)
    if match is None:
        raise DestinationRefused(_shape_problem(rest))
    host, port = match["host"], int(match["port"] or DEFAULT_PORT)
    if problem := host_problem(host):
        raise DestinationRefused(problem)
    if port != DEFAULT_PORT:
        raise DestinationRefused(f"The endpoint must use port {DEFAULT_PORT}, as push services do (not {port}).")
    _same_reading(lowered, host, port)
    return Endpoint(url=lowered, host=host, port=port, loopback=False)


def host_problem(host: str) -> str:
    """Why `host` may not receive Web Push requests ("" if it may): DNS name rules and the host list."""
    if _ip_literal(host) is not None:
        return "The endpoint's host must be a DNS name, not an IP address."
    labels = host.split(".")
    if len(host) > 253 or len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return "The endpoint's host must be a DNS name (letters, digits and hyphens, dot-separated)."
    if not _TLD.fullmatch(labels[-1]):
        # A last label of digits or 0x-hex makes URL parsers read the whole host as an IPv4 address.
        return "The endpoint's host must be a DNS name ending in a top-level domain, not a number."
    if any(host == suffix or host.endswith("." + suffix) for suffix in SPECIAL_USE_SUFFIXES):
        return f"The endpoint's host {host!r} is a local or special-use name."
    if not matches_any(host, allowed_hosts()):
        return (
            f"The endpoint's host {host!r} is not a known push service (WEAVE PUSH_WEBPUSH_HOSTS and "
            "PUSH_WEBPUSH_EXTRA_HOSTS)."
        )
    return ""


def allowed_hosts() -> tuple[str, ...]:
    """The host patterns endpoints may use: PUSH_WEBPUSH_HOSTS plus PUSH_WEBPUSH_EXTRA_HOSTS."""
    return (*weave_settings.PUSH_WEBPUSH_HOSTS, *weave_settings.PUSH_WEBPUSH_EXTRA_HOSTS)


def matches_any(host: str, patterns: Iterable[str]) -> bool:
    """Whether `host` is one of `patterns`: an exact name, `*.suffix` (any name below suffix), or `*` (any)."""
    for pattern in patterns:
        pattern = pattern.strip().lower()
        if pattern == "*" or host == pattern:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
            return True
    return False


def is_known_host(host: str) -> bool:
    """Whether answers from `host` may be kept as they came (a host the site's list names, not a fake on loopback)."""
    return _ip_literal(host) is None and host_problem(host) == ""


def address_problem(address: Address) -> str:
    """Why a connection to `address` is refused ("" if it is a public address)."""
    if isinstance(address, ipaddress.IPv6Address):
        return _v6_problem(address)
    if any(address in network for network in _REFUSED_V4):
        return f"{address} is a private, loopback, link-local, shared, multicast or reserved address"
    return ""


def _v6_problem(address: ipaddress.IPv6Address) -> str:
    embedded = _embedded_v4(address)
    if embedded is not None and (problem := address_problem(embedded)):
        return f"{address} embeds {embedded}: {problem}"
    if any(address in network for network in _REFUSED_V6):
        return f"{address} is a special-purpose IPv6 address"
    if address not in _GLOBAL_UNICAST_V6 and not any(address in network for network in _CARRIERS_V6):
        return f"{address} is not a public address"
    return ""


def loopback_allowed() -> bool:
    return bool(weave_settings.PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK)


# --- connect time -------------------------------------------------------------------------------------


class ConnectRefused(httpcore.ConnectError):
    """Raised at connect time: httpx reports it as a ConnectError (nothing was sent), chained to this."""


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolve the host, check every address, and open the TCP connection to a checked address only."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None, resolve: Resolver | None = None) -> None:
        self._inner = inner or httpcore.AnyIOBackend()
        self._resolve = resolve or system_resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.checked_addresses(host, port)
        error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                error = exc
        raise httpcore.ConnectError(f"no address of {host} accepted a connection ({error})")

    async def checked_addresses(self, host: str, port: int) -> list[Address]:
        """The addresses `host` resolves to, if every one of them passes the policy; else raise ConnectRefused."""
        loopback = _loopback_host(host) if loopback_allowed() else None
        if loopback is None:
            if problem := host_problem(host):
                raise ConnectRefused(f"refused by the destination policy: {problem}")
        try:
            addresses = [ipaddress.ip_address(text.split("%", 1)[0]) for text in await self._resolve(host, port)]
        except (OSError, ValueError) as exc:
            raise httpcore.ConnectError(f"{host} does not resolve ({type(exc).__name__}: {exc})") from exc
        if not addresses:
            raise httpcore.ConnectError(f"{host} resolves to no address")
        for address in addresses:
            problem = ("" if address.is_loopback else f"{address} is not a loopback address") if loopback else (
                address_problem(address)
            )  # fmt: skip
            if problem:
                # Every address must pass: a name with one public and one private address is refused whole.
                raise ConnectRefused(f"refused by the destination policy: {host} resolves to {problem}")
        return list(dict.fromkeys(addresses))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise ConnectRefused("refused by the destination policy: no Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for `host` (off the event loop, like any getaddrinfo)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's HTTP/1.1 + HTTP/2 transport whose connections open only through `GuardedNetworkBackend`."""

    def __init__(self, *, verify: Any, max_connections: int, resolve: Resolver | None = None) -> None:
        # One context per process for the trust store httpx reads (certifi, or SSL_CERT_FILE /
        # SSL_CERT_DIR), which httpcore configures the same way at each connection (ALPN http/1.1 and
        # h2). Proxies never apply: the client is handed this transport.
        context = client_context(verify, use="httpcore")
        super().__init__(verify=context, http2=True, trust_env=True)
        # The same pool httpx builds, with the guarded network backend (httpx takes none as an argument).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=5.0,
            http1=True,
            http2=True,
            network_backend=GuardedNetworkBackend(resolve=resolve),
        )


def refusal_in(exc: BaseException) -> ConnectRefused | None:
    """The ConnectRefused behind `exc` (httpx and capped_request wrap it), if there is one."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, ConnectRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


# --- helpers ------------------------------------------------------------------------------------------


def _lower_authority(rest: str) -> str:
    """Lower-case the host part (hosts are case-insensitive; paths are not)."""
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    return rest[:cut].lower() + rest[cut:]


def _shape_problem(rest: str) -> str:
    authority = rest.split("/", 1)[0]
    if "@" in authority:
        return "The endpoint must not carry a user name or password."
    if "#" in rest:
        return "The endpoint must not have a fragment."
    return "The endpoint is not a plain https://host/path URL (no spaces, backslashes or unusual characters)."


def _same_reading(url: str, host: str, port: int) -> None:
    """Refuse a URL that the HTTP client would send somewhere else than the host checked here."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise DestinationRefused("The endpoint is not a valid URL.") from exc
    if parsed.host != host or (parsed.port or DEFAULT_PORT) != port or parsed.userinfo:
        raise DestinationRefused("The endpoint is read differently by the HTTP client; refused.")


def _ip_literal(host: str) -> Address | None:
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    try:
        # inet_aton reads the legacy spellings too: 0x7f000001, 2130706433, 0177.0.0.1, 127.1.
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except (OSError, ValueError):
        return None


def _loopback_host(host: str) -> Address | str | None:
    """With the unsafe opt-in: `host` if it is localhost or a loopback IP literal, else None."""
    if host == "localhost":
        return host
    address = _ip_literal(host)
    return address if address is not None and address.is_loopback and str(address) == host.strip("[]") else None


def _loopback_endpoint(url: str) -> Endpoint | None:
    """An https endpoint on loopback, accepted only under PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK; else None."""
    if not loopback_allowed():
        return None
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError):
        return None
    if parsed.scheme != "https" or parsed.userinfo or parsed.fragment or "\\" in url:
        return None
    host = parsed.host
    if _loopback_host(host) is None:
        return None
    return Endpoint(url=url, host=host, port=parsed.port or DEFAULT_PORT, loopback=True)


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, NAT64, Teredo server or client), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.teredo is not None:
        server, client = address.teredo
        return client if address_problem(client) else server
    return None
