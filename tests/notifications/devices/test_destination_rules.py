"""The destination policy's own rules: host patterns at a name's label boundary, and what the loopback
opt-in still checks. Pure rules, with a stand-in resolver: nothing leaves the machine."""

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notifications.backends.destinations import (
    ConnectRefused,
    DestinationRefused,
    GuardedNetworkBackend,
    check_endpoint,
    matches_any,
)

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
NAME = st.lists(LABEL, min_size=1, max_size=4).map(".".join)


class _Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.calls.append((host, port))
        return object()


def _resolver(addresses):
    async def resolve(host, port):
        return list(addresses)

    return resolve


# --- host patterns ---------------------------------------------------------------------------------


@given(suffix=NAME, below=NAME)
def test_wildcard__matches_every_name_below_the_suffix(suffix, below):
    assert matches_any(f"{below}.{suffix}", [f"*.{suffix}"])


@given(suffix=NAME)
def test_wildcard__does_not_match_the_suffix_itself(suffix):
    assert not matches_any(suffix, [f"*.{suffix}"])


@given(suffix=NAME, glued=LABEL)
def test_wildcard__stops_at_the_label_boundary(suffix, glued):
    # "evilpush.example" is not below "push.example": the suffix must start a label.
    assert not matches_any(f"{glued}{suffix}", [f"*.{suffix}"])


@given(host=NAME, other=NAME)
def test_exact_pattern__matches_only_that_name(host, other):
    assert matches_any(host, [host])
    assert matches_any(host, [other]) == (host == other)


@given(host=NAME)
def test_patterns__are_read_without_case_or_surrounding_space(host):
    assert matches_any(host, [f"  {host.upper()} "])


def test_wildcard__an_empty_first_label_is_not_a_name_below():
    assert not matches_any(".push.example", ["*.push.example"])


# --- the loopback opt-in ------------------------------------------------------------------------------


@pytest.fixture
def allow_loopback(settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": True}


@pytest.mark.parametrize("addresses", [["10.0.0.5"], ["127.0.0.1", "192.168.1.2"], ["8.8.8.8"]])
def test_opt_in__localhost_must_resolve_to_loopback_only(allow_loopback, addresses):
    inner = _Recording()
    guard = GuardedNetworkBackend(inner=inner, resolve=_resolver(addresses))
    with pytest.raises(ConnectRefused, match="not a loopback address"):
        asyncio.run(guard.connect_tcp("localhost", 443))
    assert inner.calls == []


def test_opt_in__localhost_resolving_to_loopback_connects_to_the_checked_address(allow_loopback):
    inner = _Recording()
    guard = GuardedNetworkBackend(inner=inner, resolve=_resolver(["127.0.0.1"]))
    asyncio.run(guard.connect_tcp("localhost", 443))
    assert inner.calls == [("127.0.0.1", 443)]


@pytest.mark.parametrize("host", ["10.0.0.5", "169.254.169.254", "internal.example.com"])
def test_opt_in__lets_through_loopback_only_not_every_private_address(allow_loopback, host):
    inner = _Recording()
    guard = GuardedNetworkBackend(inner=inner, resolve=_resolver(["10.0.0.5"]))
    with pytest.raises(ConnectRefused):
        asyncio.run(guard.connect_tcp(host, 443))
    assert inner.calls == []


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9000/push", "https://user@127.0.0.1:9000/push", "https://10.0.0.5:9000/push"],
)
def test_opt_in__a_loopback_endpoint_must_still_be_plain_https(allow_loopback, url):
    with pytest.raises(DestinationRefused):
        check_endpoint(url)


def test_opt_in__off_refuses_localhost_whatever_it_resolves_to(settings):
    settings.WEAVE = {**getattr(settings, "WEAVE", {}), "PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK": False}
    inner = _Recording()
    guard = GuardedNetworkBackend(inner=inner, resolve=_resolver(["127.0.0.1"]))
    with pytest.raises(ConnectRefused):
        asyncio.run(guard.connect_tcp("localhost", 443))
    assert inner.calls == []
