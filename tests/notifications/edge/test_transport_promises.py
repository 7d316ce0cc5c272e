"""What every transport path of the webhook promises: a body read only up to the cap, and no cookies kept.

Both paths run: the lean exchange, and httpx's streamed path that URLs with userinfo take.
"""

import asyncio
import uuid

import pytest

from notifications.backends.base import Outcome, PushMessage
from notifications.backends.http import BODY_CAP
from tests.notifications.edge.hostile_http11 import HostilePeer
from tests.notifications.edge.test_http11_binding import PATHS, backend, send_in_turn


def message() -> PushMessage:
    return PushMessage(idempotency_key=str(uuid.uuid4()), token="tok", title="t", body="b")


@pytest.mark.parametrize("path", PATHS)
def test_a_huge_body_is_read_only_up_to_the_cap(path: str) -> None:
    with HostilePeer(plan=["huge"]) as peer:
        (result,) = asyncio.run(send_in_turn(backend(peer, path), [message()]))

    assert result.outcome == Outcome.DELIVERED
    assert f"[body cut at {BODY_CAP} bytes]" in result.reason  # cut at the cap, so not parsed as JSON


@pytest.mark.parametrize("path", PATHS)
def test_a_planted_cookie_is_never_sent_back(path: str) -> None:
    with HostilePeer(plan=["cookie", "cookie"]) as peer:
        results = asyncio.run(send_in_turn(backend(peer, path), [message(), message(), message()]))

    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert len(peer.heads) == 3
    assert all("cookie" not in head for head in peer.heads)
