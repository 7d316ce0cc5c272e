"""The breaker's rule alone (pure): a failure ratio over a window with a minimum volume, holds, half-open probes."""

from notifications.backends import Outcome, SendResult
from notifications.delivery.breaker import BreakerRule, Breakers, CircuitBreaker

FAIL = SendResult(outcome=Outcome.TEMPORARY, http_status=503, reason="HTTP 503", systemic=True)
OK = SendResult(outcome=Outcome.DELIVERED, http_status=200)
GONE = SendResult(outcome=Outcome.PERMANENT, http_status=410, reason="HTTP 410", token_invalid=True)
SILENT = SendResult(outcome=Outcome.UNKNOWN, reason="no answer")
# The mechanics below are shown on a small window (the defaults are sized in test_breaker_sizing.py):
# half of the last twenty, once ten answers are in, and no run rule.
SMALL = BreakerRule(window=20, min_answers=10, run=0)


def _feed(breaker, answers, now=0.0):
    return [breaker.record(a, now) for a in answers]


def test_a_minority_failing_never_opens_even_with_five_in_a_row_by_completion_order():
    # With many requests in flight failures may complete together: five in a row (which opened the old
    # "5 in a row" breaker) amid a provider that fails one answer in three or four.
    answers = [OK] * 10 + [FAIL] * 5 + ([OK, OK, OK, FAIL] * 10) + ([OK, OK, FAIL] * 10)
    for breaker in (CircuitBreaker(SMALL), CircuitBreaker()):
        assert not any(_feed(breaker, answers))
        assert breaker.state == "closed" and breaker.allows(0.0) == "go"


def test_opens_at_half_of_the_last_twenty_once_ten_answers_are_in():
    breaker = CircuitBreaker(SMALL, name="backend 'default'")
    assert _feed(breaker, [FAIL] * 9) == [False] * 9  # below the minimum volume
    assert breaker.record(FAIL, 0.0) is True
    assert breaker.reason == (
        "Circuit breaker opened for backend 'default': 10 of its last 10 answers failed (last: HTTP 503)"
    )
    mixed = CircuitBreaker(SMALL)
    assert not any(_feed(mixed, [OK] * 11 + [FAIL] * 9))  # 9 of 20
    assert mixed.record(FAIL, 0.0) is True  # the window slides: 10 of the last 20


def test_token_level_refusals_are_healthy_answers_and_unknowns_count_as_failures():
    breaker = CircuitBreaker(SMALL)
    assert not any(_feed(breaker, [GONE] * 30))
    assert not any(_feed(breaker, [SILENT] * 9))
    assert breaker.record(SILENT, 0.0) is True  # 10 of the last 20: a peer that never answers opens it


def test_a_fatal_answer_opens_at_once_and_retry_after_sets_the_hold_within_its_cap():
    rule = BreakerRule(cooldown=30, cap=3600, origin_cap=300)
    redirect = SendResult(outcome=Outcome.TEMPORARY, reason="HTTP 307", systemic=True, fatal=True)
    backend = CircuitBreaker(rule)
    assert backend.record(redirect, 0.0) is True and backend.seconds_open(0.0) == 30
    slow = SendResult(outcome=Outcome.TEMPORARY, reason="503", systemic=True, fatal=True, retry_after=3600)
    provider = CircuitBreaker(rule)
    provider.record(slow, 0.0)
    assert provider.seconds_open(0.0) == 3600  # the provider's own ask, up to the backend's cap
    stranger = Breakers(rule).get(Breakers.scope("webpush", "https://evil.example"))
    stranger.record(slow, 0.0)
    assert stranger.user_chosen and stranger.seconds_open(0.0) == 300  # a user-chosen origin: capped


def test_half_open__one_probe_then_closed_on_success_or_open_again_on_failure():
    breaker = CircuitBreaker(BreakerRule(cooldown=30))
    breaker.record(SendResult(outcome=Outcome.TEMPORARY, reason="401", systemic=True, fatal=True), 0.0)
    assert breaker.allows(10.0) == ""
    assert breaker.allows(30.0) == "probe"
    assert breaker.allows(30.0) == ""  # one probe at a time
    assert breaker.record(OK, 31.0) is False and breaker.state == "half-open"  # not the probe's answer
    assert breaker.record(FAIL, 31.0, probe=True) is True and breaker.seconds_open(31.0) == 30
    assert "half-open probe failed" in breaker.reason
    assert breaker.allows(61.0) == "probe"
    breaker.record(OK, 62.0, probe=True)
    assert breaker.state == "closed" and breaker.allows(62.0) == "go"


def test_scopes__per_backend_alias_and_per_user_chosen_origin():
    breakers = Breakers(BreakerRule())
    one = breakers.get(Breakers.scope("webpush", "https://a.example"))
    one.record(SendResult(outcome=Outcome.TEMPORARY, reason="307", systemic=True, fatal=True), 0.0)
    assert breakers.get(Breakers.scope("webpush", "https://a.example")).allows(1.0) == ""
    assert breakers.get(Breakers.scope("webpush", "https://b.example")).allows(1.0) == "go"
    assert breakers.get(Breakers.scope("default")).allows(1.0) == "go"
    assert not breakers.get(Breakers.scope("default")).user_chosen


def _dropped(incident: str) -> SendResult:
    return SendResult(
        outcome=Outcome.UNKNOWN, reason="the connection was lost after the request was sent", incident=incident
    )


def test_one_dropped_connection_is_one_failure_however_many_requests_it_took_with_it():
    # A hundred streams cut by one connection loss, among answers that are fine: one event, one failure.
    breaker = CircuitBreaker(SMALL)
    answers = [OK] * 5 + [_dropped("h2 connection 7")] * 100 + [OK] * 20
    assert not any(_feed(breaker, answers))
    assert breaker.state == "closed" and list(breaker.answers).count(True) == 0  # slid out of the window
    # Different connections failing, half the answers: a scope in trouble, which opens.
    troubled = CircuitBreaker(SMALL)
    mixed = [answer for n in range(5) for answer in (OK, _dropped(f"h2 connection {n}"))]
    assert _feed(troubled, mixed) == [False] * 9 + [True]
    assert "5 of its last 10 answers failed" in troubled.reason


def test_an_incident_counts_once_and_a_failure_without_one_counts_each_time():
    breaker = CircuitBreaker(SMALL)
    assert not any(_feed(breaker, [_dropped("a")] * 3 + [OK] * 9))
    assert list(breaker.answers) == [True] + [False] * 9  # "a" once
    # A failure without an incident counts by itself, every time.
    assert not any(_feed(breaker, [SILENT] * 4))
    assert list(breaker.answers).count(True) == 5


# --- start order -----------------------------------------------------------------------------------


def _started(breaker: CircuitBreaker, n: int) -> list[int]:
    tickets = []
    for _ in range(n):
        assert breaker.allows(0.0) == "go"
        tickets.append(breaker.take_ticket())
    return tickets


def test_answers_are_judged_in_the_order_their_rows_started_not_as_they_complete():
    # One request in three fails, and the failures come back first (a 503 is quicker than a
    # delivery). Judged as they complete, the first ten answers would be seven failures.
    breaker = CircuitBreaker(SMALL)
    tickets = _started(breaker, 30)
    failing = [t for t in tickets if t % 3 == 2]
    fine = [t for t in tickets if t % 3 != 2]
    assert not any(breaker.record(FAIL, 0.0, ticket=t) for t in failing)
    assert not breaker.answers  # waiting for the rows started before them
    assert not any(breaker.record(OK, 0.0, ticket=t) for t in fine)
    assert breaker.state == "closed" and list(breaker.answers).count(True) == 7  # 7 of the last 20 started
    # The arrival-order reading of the same answers opens the breaker: what the tickets prevent.
    by_arrival = CircuitBreaker(SMALL)
    assert any(by_arrival.record(answer, 0.0) for answer in [FAIL] * 10 + [OK] * 20)


def test_a_scope_failing_in_start_order_still_opens_however_its_answers_complete():
    breaker = CircuitBreaker(SMALL)
    tickets = _started(breaker, 12)
    assert not any(breaker.record(FAIL, 0.0, ticket=t) for t in reversed(tickets[1:10]))
    assert breaker.record(FAIL, 0.0, ticket=tickets[0]) is True  # the gap filled: ten in a row failed
    assert "10 of its last 10 answers failed" in breaker.reason
    # Rows started before the opening answer afterwards: they neither count nor reopen it later.
    assert breaker.allows(30.0) == "probe" and breaker.record(OK, 30.0, probe=True) is False
    assert breaker.record(FAIL, 30.0, ticket=tickets[10]) is False and not breaker.answers


def test_one_hung_request_does_not_stall_the_judgment_of_the_answers_after_it():
    breaker = CircuitBreaker(SMALL)
    hung, *rest = _started(breaker, 40)
    opened = [breaker.record(FAIL, 0.0, ticket=t) for t in rest[:20]]
    # Twenty answers wait behind the hung one: it is passed over, and the twenty are judged.
    assert opened == [False] * 19 + [True] and breaker.state == "open"
    # When the hung request answers at last it is counted, not dropped: a fresh breaker shows it.
    late = CircuitBreaker(SMALL)
    first, *others = _started(late, 25)
    assert not any(late.record(OK, 0.0, ticket=t) for t in others[:20])
    assert first in late.skipped and len(late.answers) == 20
    assert late.record(SILENT, 0.0, ticket=first) is False
    assert first not in late.skipped and list(late.answers)[-1] is True


def test_the_run_rule_opens_on_twenty_failures_in_a_row_before_the_minimum_volume():
    breaker = CircuitBreaker(name="backend 'default'")  # the defaults: a run of 20 opens it
    assert not any(_feed(breaker, [FAIL] * 19 + [OK] + [FAIL] * 19))  # a healthy answer ends a run
    assert breaker.record(FAIL, 0.0) is True
    assert breaker.reason == (
        "Circuit breaker opened for backend 'default': its last 20 answers failed, one after another (last: HTTP 503)"
    )
    # One incident counts once in a run too: a hundred streams of one lost connection are not a run.
    shared = CircuitBreaker()
    assert not any(_feed(shared, [_dropped("h2 connection 9")] * 100))
    assert shared.streak == 1
    assert not any(_feed(CircuitBreaker(BreakerRule(run=0)), [FAIL] * 199))  # 0: no run rule, the volume first
