"""The date rules as properties over every instant and time zone a user or a site's policy can give:
`send_at` is accepted exactly within its window of now, and a quiet-hours deferral is bounded the same
way. Pure rules: no database."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from hypothesis import given
from hypothesis import strategies as st

from notifications.quiet import deferral_reason, quiet_until
from notifications.validation import SEND_AT_WINDOW, check_send_at

ZONES = st.sampled_from(sorted(available_timezones())).map(ZoneInfo)
NOW = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(lambda d: d.replace(tzinfo=UTC))
ANY_INSTANT = st.datetimes(min_value=datetime.min, max_value=datetime.max)


@given(now=NOW, offset=st.timedeltas(min_value=-SEND_AT_WINDOW, max_value=SEND_AT_WINDOW), zone=ZONES)
def test_send_at__every_instant_within_the_window_is_accepted_in_any_zone(now, offset, zone):
    at = (now + offset).astimezone(zone)
    assert check_send_at(at, now=now) == at


@given(now=NOW, naive=ANY_INSTANT, zone=st.one_of(st.none(), ZONES))
def test_send_at__any_instant_is_accepted_or_refused_by_name_and_never_crashes(now, naive, zone):
    value = naive if zone is None else naive.replace(tzinfo=zone)
    try:
        accepted = check_send_at(value, now=now)
    except ValidationError as refused:
        assert "send_at" in refused.message_dict
        return
    # Accepted only when aware and within the window, whatever its zone.
    assert accepted.utcoffset() is not None and abs(accepted - now) <= SEND_AT_WINDOW


@given(now=NOW, beyond=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=3000)))
def test_send_at__one_second_past_the_window_either_way_is_refused(now, beyond):
    for at in (now + SEND_AT_WINDOW + beyond, now - SEND_AT_WINDOW - beyond):
        with pytest.raises(ValidationError):
            check_send_at(at, now=now)


@given(at=NOW, later=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=800)), zone=ZONES)
def test_quiet_until__a_deferral_is_kept_only_within_the_window(at, later, zone):
    def policy(user, when, priority):
        return (when + later).astimezone(zone)

    if later > SEND_AT_WINDOW:
        with pytest.raises(ImproperlyConfigured, match="deferred a push"):
            quiet_until(policy, None, at, "normal")
        return
    until = quiet_until(policy, None, at, "normal")
    assert until is None if later == timedelta(0) else until == at + later
    if until is not None:
        assert deferral_reason(at, until).startswith("Deferred by the quiet-hours policy from ")


@given(at=NOW, naive=ANY_INSTANT)
def test_quiet_until__a_naive_answer_from_the_policy_is_a_configuration_error(at, naive):
    with pytest.raises(ImproperlyConfigured, match="aware datetime"):
        quiet_until(lambda user, when, priority: naive, None, at, "normal")
