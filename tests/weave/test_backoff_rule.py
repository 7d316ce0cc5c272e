"""The backoff rule as a formula, for every attempt number and setting (properties, not examples)."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weave.jobs import Fail, RetryPolicy
from weave.retry import backoff_seconds, parse_retry_after

ATTEMPT = st.integers(min_value=1, max_value=200)
BASE = st.floats(min_value=0.01, max_value=600, allow_nan=False)
CAP = st.floats(min_value=0.01, max_value=86_400, allow_nan=False)
SEED = st.integers(min_value=0, max_value=2**32)


@given(attempt=ATTEMPT, base=BASE, cap=CAP, seed=SEED)
def test_backoff__stays_between_half_and_all_of_the_capped_exponential(attempt, base, cap, seed):
    ceiling = min(cap, base * 2 ** (attempt - 1))
    delay = backoff_seconds(attempt, base=base, cap=cap, rng=random.Random(seed))
    assert ceiling / 2 <= delay <= ceiling


@given(attempt=ATTEMPT, base=BASE, cap=CAP)
def test_backoff__the_least_possible_wait_never_shrinks_as_attempts_grow(attempt, base, cap):
    # With the jitter at its least (rng.uniform -> 0), the delay is half the capped exponential.
    class Least(random.Random):
        def uniform(self, a, b):
            return a

    now = backoff_seconds(attempt, base=base, cap=cap, rng=Least())
    after = backoff_seconds(attempt + 1, base=base, cap=cap, rng=Least())
    assert after >= now


@given(base=BASE, cap=CAP, seeds=st.lists(SEED, min_size=20, max_size=20, unique=True))
def test_backoff__jitter_spreads_jobs_that_failed_together(base, cap, seeds):
    delays = {backoff_seconds(3, base=base, cap=cap, rng=random.Random(s)) for s in seeds}
    assert len(delays) > 1


@given(attempt=st.integers(min_value=1, max_value=50), maximum=st.integers(min_value=1, max_value=20))
def test_retry_policy__retries_until_max_attempts_and_never_a_business_refusal(attempt, maximum):
    policy = RetryPolicy(max_attempts=maximum, backoff=1.0, backoff_max=60.0)
    after_error = policy.retry_in(attempt, ConnectionError("down"))
    assert (after_error is None) == (attempt >= maximum)
    if after_error is not None:
        assert 0 < after_error <= 60.0
    assert policy.retry_in(attempt, Fail("card declined")) is None


@given(seconds=st.integers(min_value=0, max_value=10**9))
def test_retry_after__delta_seconds_are_read_as_given(seconds):
    assert parse_retry_after(f" {seconds} ") == float(seconds)


@given(text=st.text(max_size=40))
def test_retry_after__any_text_is_a_delay_of_zero_or_more_or_none(text):
    value = parse_retry_after(text)
    assert value is None or value >= 0


@pytest.mark.parametrize("header", ["²", "١٢", "３", "½"])
def test_retry_after__digits_outside_ascii_are_not_a_delay_and_never_raise(header):
    assert parse_retry_after(header) is None
