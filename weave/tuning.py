"""Lease TTL from telemetry: what TTL the protocol needs, given the latency recent traffic showed.

The formula (docs/DESIGN.md "Lease TTL from telemetry" explains the choice):

    slow   = the PERCENTILE-th percentile (p99) of recent latencies, capped at the request timeout
             (a request cannot outlast its timeout; a p99 at the cap means requests are timing out)
    margin = max(MARGIN_FLOOR, MARGIN_SHARE * slow)   (database round trips, scheduling, clock steps)
    beat   = the heartbeat interval: HEARTBEAT_INTERVAL if set, else ttl / 3
    need   = slow + beat + margin

A renewal can be held up by one request on the renewing thread (the push worker renews between
sends; the onboarding client checks its heartbeat between calls), so the gap between two landed
renewals can reach one request plus one heartbeat interval. The lease must outlast that gap with
room to spare. With the default interval ttl/3 the equation ttl = slow + ttl/3 + margin gives
ttl = 1.5 * (slow + margin).

This module is pure: no database, no settings. `weave.telemetry` feeds it.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from weave.wording import how_many

PERCENTILE = 99.0
MIN_SAMPLES = 20  # fewer than this and the percentile says nothing: no recommendation
MARGIN_FLOOR = 1.0  # seconds
MARGIN_SHARE = 0.2


def percentile(values: Sequence[float], pct: float) -> float:
    """Return the `pct` percentile of `values` (linear interpolation between closest ranks)."""
    if not values:
        raise ValueError("percentile() of no values")
    if not 0 <= pct <= 100:
        raise ValueError(f"pct must be within 0..100, not {pct}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class TtlAdvice:
    """The TTL one source of latency needs, with the figures behind it (all in seconds)."""

    samples: int
    p50: float | None
    p95: float | None
    p99: float | None
    slowest_plausible: float | None
    heartbeat_slack: float | None
    margin: float | None
    needed: float | None  # None: too few samples to say
    configured: float
    timeout: float | None

    @property
    def enough_data(self) -> bool:
        return self.needed is not None

    @property
    def too_short(self) -> bool:
        """True when the configured TTL is below what the observed traffic needs."""
        return self.needed is not None and self.configured < self.needed

    def explain(self) -> str:
        if self.needed is None:
            return f"only {how_many(self.samples, 'sample{}')}; at least {MIN_SAMPLES} are needed for a recommendation"
        slack = "ttl/3" if self.heartbeat_slack is None else f"{self.heartbeat_slack:.2f}"
        return (
            f"p{PERCENTILE:g} {self.slowest_plausible:.2f} s + heartbeat {slack} + margin {self.margin:.2f} s "
            f"= {self.needed:.0f} s (configured {self.configured:g} s)"
        )


def recommend_ttl(
    latencies: Sequence[float],
    *,
    configured: float,
    heartbeat_interval: float | None = None,
    timeout: float | None = None,
) -> TtlAdvice:
    """Return the lease TTL that `latencies` (seconds, one per request) call for, rounded up to a second."""
    if any(v < 0 or math.isnan(v) for v in latencies):
        raise ValueError("latencies must be non-negative numbers of seconds")
    count = len(latencies)
    if count < MIN_SAMPLES:
        p = {q: percentile(latencies, q) if latencies else None for q in (50, 95, 99)}
        return TtlAdvice(count, p[50], p[95], p[99], None, None, None, None, configured, timeout)
    p50, p95, p99 = (percentile(latencies, q) for q in (50, 95, 99))
    slow = percentile(latencies, PERCENTILE)
    if timeout is not None:
        slow = min(slow, timeout)
    margin = max(MARGIN_FLOOR, MARGIN_SHARE * slow)
    if heartbeat_interval is None:
        needed = 1.5 * (slow + margin)  # ttl = slow + ttl/3 + margin
        slack = needed / 3
    else:
        slack = heartbeat_interval
        needed = slow + slack + margin
    return TtlAdvice(
        samples=count,
        p50=p50,
        p95=p95,
        p99=p99,
        slowest_plausible=slow,
        heartbeat_slack=slack,
        margin=margin,
        needed=float(math.ceil(needed)),
        configured=configured,
        timeout=timeout,
    )
