"""The lease TTL advice on synthetic latency distributions: a pure function, no database."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weave.tuning import MIN_SAMPLES, percentile, recommend_ttl


def test_percentile__interpolates_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile(list(range(101)), 99) == 99


def test_fast_steady_provider__default_ttl_covers_it():
    rng = random.Random(1)
    latencies = [rng.gauss(0.15, 0.02) for _ in range(2000)]
    advice = recommend_ttl(latencies, configured=30.0, timeout=10.0)
    # p99 of N(0.15, 0.02) is about 0.197 s; margin is the 1 s floor; ttl = 1.5 * (p99 + 1).
    assert advice.p99 == pytest.approx(0.197, abs=0.01)
    assert advice.needed == 2.0
    assert not advice.too_short


def test_heavy_tail__p99_decides_and_the_ttl_grows_with_it():
    rng = random.Random(2)
    # 98 % fast answers, 2 % that take 6-8 s: the p99 lands in the slow tail.
    latencies = [rng.uniform(0.1, 0.3) if rng.random() < 0.98 else rng.uniform(6, 8) for _ in range(5000)]
    advice = recommend_ttl(latencies, configured=10.0, timeout=10.0)
    assert 6 <= advice.slowest_plausible <= 8
    assert advice.needed == pytest.approx(1.5 * (advice.slowest_plausible * 1.2), abs=1)
    assert advice.too_short  # 10 s cannot cover a 7 s request plus a ttl/3 heartbeat plus margin


def test_requests_hitting_the_timeout__slowest_is_capped_at_the_timeout():
    latencies = [10.0] * 50 + [0.2] * 50  # half of them timed out at 10 s (the client gives up there)
    advice = recommend_ttl([*latencies, 60.0], configured=30.0, timeout=10.0)
    assert advice.slowest_plausible == 10.0
    assert advice.needed == 18.0  # 1.5 * (10 + 2)


def test_explicit_heartbeat_interval__is_added_as_is():
    advice = recommend_ttl([1.0] * 100, configured=5.0, heartbeat_interval=2.0)
    assert advice.heartbeat_slack == 2.0
    assert advice.needed == 4.0  # 1 + 2 + max(1, 0.2)
    assert not advice.too_short


def test_too_few_samples__no_recommendation_and_no_warning():
    advice = recommend_ttl([50.0] * (MIN_SAMPLES - 1), configured=1.0)
    assert advice.needed is None
    assert not advice.too_short
    assert "at least" in advice.explain()


def test_bad_input__refused():
    with pytest.raises(ValueError):
        recommend_ttl([0.1, -1.0], configured=1.0)


@given(st.lists(st.floats(min_value=0, max_value=120, allow_nan=False), min_size=MIN_SAMPLES, max_size=300))
def test_needed_ttl__always_outlasts_the_p99_request_plus_a_third_of_itself(latencies):
    advice = recommend_ttl(latencies, configured=30.0)
    assert advice.needed is not None
    # The protocol's condition: one request plus one heartbeat interval (ttl/3) fits inside the ttl.
    assert advice.slowest_plausible + advice.needed / 3 + advice.margin <= advice.needed + 1e-9
    # And adding slower samples never lowers the advice.
    slower = recommend_ttl([v + 1 for v in latencies], configured=30.0)
    assert slower.needed >= advice.needed
