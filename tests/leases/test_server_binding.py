"""The group statements sent server-bound on PostgreSQL: the same stored rows, seen by Django, never prepared.

`release_each` and `insert_receipts` send their arrays apart from the SQL text (weave.leases.binding).
Each stored value must be what the client-bound path (psycopg quoting the arrays into the text)
stores: the same statement run through `connection.cursor()` is the reference, beside the values
themselves. Django's wrappers and query logging must see every statement, a pooler must never meet a
named prepared statement, and a replaced `connection.cursor` (django-debug-toolbar's) stays in the way.
"""

from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
from django.db import DataError, connection, connections, models, transaction
from django.test.utils import CaptureQueriesContext

from tests.leasetest.models import Job, Receipt, Sample
from weave.leases import DatabaseClock, FakeClock, insert_receipts
from weave.leases.binding import statement_cursor
from weave.leases.bulk import finish_sql, insert_sql

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
TTL = 30
SAMPLED = ["small", "pos_small", "integer", "pos_int", "big", "pos_big", "flag", "name", "text", "when", "ratio"]
INDIA = timezone(timedelta(hours=5, minutes=30))


class Word(models.TextChoices):
    """A choice is a str subclass (and an Enum): it must travel as its value, beside plain strings."""

    NULL = "NULL", "the word NULL"


# One row per trap: type limits, NULLs between values, quotes and backslashes, words the array text
# format treats specially, unicode beyond the BMP, an aware time in another zone, a float at its edges.
ADVERSARIAL = [
    {
        "small": -32768,
        "pos_small": 32767,
        "integer": -(2**31),
        "pos_int": 2**31 - 1,
        "big": -(2**63),
        "pos_big": 2**63 - 1,
        "flag": True,
        "name": 'it\'s "quoted" \\ back\\slash',
        "text": 'line\nnext\ttab \u2028 \u00e9 \u2713 \U0001f600 \\N NULL {} , "',
        "when": datetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=INDIA),
        "ratio": 1e-300,
    },
    dict.fromkeys(SAMPLED),  # every value NULL: the arrays carry no element type of their own
    {
        "small": 0,
        "pos_small": 0,
        "integer": 0,
        "pos_int": 0,
        "big": 1,  # a small value in a column whose other rows are near the 64-bit limits
        "pos_big": 0,
        "flag": False,
        "name": "",
        "text": "",
        "when": datetime(1970, 1, 1, tzinfo=UTC),
        "ratio": float("inf"),
    },
    {
        "small": None,
        "pos_small": 7,
        "integer": None,
        "pos_int": 8,
        "big": None,
        "pos_big": 9,
        "flag": None,
        "name": Word.NULL,
        "text": '"NULL"',
        "when": None,
        "ratio": -0.5,
    },
    {"name": "{a,b}", "text": "'); DROP TABLE leasetest_sample; --", "ratio": 3e300},  # the others kept
]


def _stored(pks):
    rows = Sample.objects.filter(pk__in=pks).order_by("pk").values_list("owner", "lease_expires_at", *SAMPLED)
    return [tuple(row) for row in rows]


def _claimed(count, clock):
    samples = [Sample.objects.create(name="before", text="before", big=5) for _ in range(count)]
    pks = [s.pk for s in samples]
    batch = Sample.objects.filter(pk__in=pks).order_by("pk").claim_batch(owner="me", ttl=TTL, limit=count, clock=clock)
    return pks, batch


def _client_bound(statement_sql, params):
    """The reference: the same statement through connection.cursor(), which quotes on the client."""
    with connection.cursor() as cursor:
        assert isinstance(cursor.cursor, psycopg.ClientCursor)
        cursor.execute(statement_sql, params)
        return cursor.fetchall() if cursor.description else None


@pytest.mark.parametrize("clock", [FakeClock(), DatabaseClock()], ids=["fake_clock", "database_clock"])
def test_release_each__server_bound_stores_what_client_side_quoting_stores(clock):
    ours, ours_batch = _claimed(len(ADVERSARIAL), clock)
    theirs, theirs_batch = _claimed(len(ADVERSARIAL), clock)
    statement = finish_sql(
        Sample,
        connection,
        "default",
        [(theirs_batch.lease(pk), v) for pk, v in zip(theirs, ADVERSARIAL, strict=True)],
        clock,
    )
    assert statement.server_bound and "unnest(" in statement.sql
    with CaptureQueriesContext(connection) as queries:
        landed = Sample.objects.release_each(
            [(ours_batch.lease(pk), v) for pk, v in zip(ours, ADVERSARIAL, strict=True)], clock=clock
        )
    assert landed == set(ours)
    assert "$1::" in queries[-1]["sql"]  # sent with placeholders: the values travelled apart
    assert {pk for (pk,) in _client_bound(statement.sql, statement.params)} == set(theirs)
    assert _stored(ours) == _stored(theirs)
    first, nulls, zeros, mixed, partial = _stored(ours)
    assert first == (None, None, *ADVERSARIAL[0].values())
    assert nulls == (None, None, *[None] * len(SAMPLED))
    assert zeros == (None, None, *ADVERSARIAL[2].values())
    assert mixed == (None, None, *ADVERSARIAL[3].values())
    kept = dict(zip(SAMPLED, [None, None, None, None, 5, None, None, "before", "before", None, None], strict=True))
    assert partial == (None, None, *{**kept, **ADVERSARIAL[4]}.values())


def test_release_each__clock_times_and_offsets_server_bound_are_the_database_clock():
    clock = DatabaseClock()
    pks, batch = _claimed(3, clock)
    before = clock.read()
    values = [{"when": clock.now()}, {"when": clock.now(timedelta(seconds=90))}, {"when": None}]
    assert Sample.objects.release_each(
        [(batch.lease(pk), v) for pk, v in zip(pks, values, strict=True)], clock=clock
    ) == set(pks)
    after = clock.read()
    now, later, none = (s.when for s in Sample.objects.filter(pk__in=pks).order_by("pk"))
    assert before <= now <= after
    assert before + timedelta(seconds=90) <= later <= after + timedelta(seconds=90)
    assert none is None


def test_release_each__server_bound_guard_refuses_a_stale_lease_and_keeps_the_new_owners_data(clock):
    pks, batch = _claimed(2, clock)
    clock.advance(TTL + 1)
    thief = Sample.objects.claim(pks[0], owner="thief", ttl=TTL, clock=clock)
    mine = Sample.objects.filter(pk=pks[1]).claim_batch(owner="me", ttl=TTL, limit=1, clock=clock)
    rows = [(batch.lease(pks[0]), {"name": "stale"}), (mine.lease(pks[1]), {"name": "mine"})]
    assert Sample.objects.release_each(rows, clock=clock) == {pks[1]}
    stolen = Sample.objects.get(pk=pks[0])
    assert (stolen.owner, stolen.fence, stolen.name) == ("thief", thief.fence, "before")
    assert Sample.objects.get(pk=pks[1]).name == "mine"


def test_release_each__a_nul_in_text_is_a_database_error_and_changes_nothing(clock):
    pks, batch = _claimed(1, clock)
    # A DatabaseError, in the finish's transaction as the completer runs it: its row-by-row fallback catches it.
    with pytest.raises(DataError), transaction.atomic():
        Sample.objects.release_each([(batch.lease(pks[0]), {"text": "a\x00b"})], clock=clock)
    assert Sample.objects.values_list("owner", "text").get(pk=pks[0]) == ("me", "before")  # still held, unwritten


@pytest.mark.parametrize("clock", [FakeClock(), DatabaseClock()], ids=["fake_clock", "database_clock"])
def test_insert_receipts__server_bound_stores_what_client_side_quoting_stores(clock):
    jobs = [Job.objects.create() for _ in range(2)]
    rows = [
        {**dict.fromkeys(SAMPLED), **values, "fence": n, "job": jobs[n % 2].pk if n != 1 else None}
        for n, values in enumerate(ADVERSARIAL)
    ]
    with CaptureQueriesContext(connection) as queries:
        assert insert_receipts(Sample, rows) == len(rows)
    assert len(queries) == 1 and "$1::" in queries[0]["sql"]
    ours = list(Sample.objects.order_by("pk").values_list("pk", flat=True))
    [statement] = insert_sql(Sample, connection, "default", rows, list(rows[0]))
    assert statement.server_bound
    _client_bound(statement.sql, statement.params)
    theirs = [pk for pk in Sample.objects.order_by("pk").values_list("pk", flat=True) if pk not in ours]
    assert _stored(ours) == _stored(theirs)
    assert list(Sample.objects.filter(pk__in=ours).order_by("pk").values_list("job", flat=True)) == [
        jobs[0].pk,
        None,
        jobs[0].pk,
        jobs[1].pk,
        jobs[0].pk,
    ]
    assert _stored(ours)[0] == (None, None, *ADVERSARIAL[0].values())


def test_insert_receipts__a_json_column_travels_as_a_server_bound_jsonb_array():
    rows = [
        {"data": {"quote": "it's", "list": [1, None, "\\"]}, "name": "x", "fence": 0},
        {"data": None, "name": None, "fence": 1},
    ]
    [statement] = insert_sql(Sample, connection, "default", rows, ["data", "name", "fence"])
    assert statement.server_bound and "jsonb[]" in statement.sql and "VALUES" not in statement.sql
    assert insert_receipts(Sample, rows) == 2
    assert list(Sample.objects.order_by("pk").values_list("data", "name")) == [
        ({"quote": "it's", "list": [1, None, "\\"]}, "x"),
        (None, None),
    ]


def test_server_bound_statements__execute_wrappers_see_them_and_the_arrays_travel_binary(clock):
    pks, batch = _claimed(2, clock)
    job = Job.objects.create()
    seen = []

    def record(execute, sql, params, many, context):
        raw = context["cursor"].cursor
        result = execute(sql, params, many, context)
        seen.append((sql, params, type(raw), list(raw._query.formats)))  # what psycopg sent, per parameter
        return result

    receipt = {"job": job.pk, "owner": "me", "fence": 1, "outcome": "ok", "finished_at": clock.now(), "retry_at": None}
    with connection.execute_wrapper(record):
        Sample.objects.release_each([(batch.lease(pk), {"name": "done"}) for pk in pks], clock=clock)
        insert_receipts(Receipt, [receipt])
    update, insert = seen
    assert update[0].startswith("UPDATE") and insert[0].startswith("INSERT")
    assert update[1][0] == pks  # the keys' array, as a list: not quoted into the text
    for _, params, kind, formats in seen:
        assert issubclass(kind, psycopg.Cursor) and not issubclass(kind, psycopg.ClientCursor)
        for value, sent in zip(params, formats, strict=True):
            if isinstance(value, list) and any(v is not None for v in value):
                assert sent == psycopg.pq.Format.BINARY, value


def _prepared_count(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return cursor.fetchone()[0]


def test_server_bound_statements__never_make_a_named_prepared_statement(clock):
    """A pooler in transaction mode would hand a prepared statement's name to another server session."""
    raw = connections["default"]
    raw.ensure_connection()
    threshold = raw.connection.prepare_threshold
    raw.connection.prepare_threshold = 0  # prepare everything psycopg may prepare, at once
    try:
        before = _prepared_count(raw)  # the session may hold the push hand-over's own (binding.may_prepare)
        for _ in range(3):
            pks, batch = _claimed(2, clock)
            Sample.objects.release_each([(batch.lease(pk), {"name": "done"}) for pk in pks], clock=clock)
            insert_receipts(Sample, [{"name": "r", "fence": 0}, {"name": None, "fence": 2**40}])
        assert _prepared_count(raw) == before
    finally:
        raw.connection.prepare_threshold = threshold


def test_a_replaced_connection_cursor_is_used_as_it_is_by_django_debug_toolbar(clock):
    """The toolbar replaces `cursor` on the connection to record queries: the statements go through it."""
    raw = connections["default"]
    pks, batch = _claimed(2, clock)
    original = raw.cursor
    through = []

    def recording_cursor(*args, **kwargs):
        through.append(True)
        return original(*args, **kwargs)

    raw.cursor = recording_cursor
    try:
        assert Sample.objects.release_each([(batch.lease(pk), {"name": "done"}) for pk in pks], clock=clock) == set(pks)
        insert_receipts(Sample, [{"name": "r", "fence": 0}])
    finally:
        del raw.cursor
    assert len(through) == 2
    assert list(Sample.objects.filter(pk__in=pks).values_list("name", flat=True)) == ["done", "done"]


def test_statement_cursor__on_a_site_that_binds_on_the_server_already():
    """OPTIONS server_side_binding=True: Django's cursors bind on the server too; ours still never prepares."""
    settings = {
        **connection.settings_dict,
        "OPTIONS": {**connection.settings_dict["OPTIONS"], "server_side_binding": True},
    }
    site = type(connections["default"])(settings, alias="server_bound_site")
    try:
        site.ensure_connection()
        site.connection.prepare_threshold = 0  # prepare everything psycopg may prepare, at once
        for _ in range(3):
            with statement_cursor(site, server_bound=True) as cursor:
                cursor.execute("SELECT %s::bigint[], %s::text[]", [[1, None, 2**62], ["it's", None]])
                assert cursor.fetchone() == ([1, None, 2**62], ["it's", None])
        site.connection.prepare_threshold = None  # or the count's own statement would be prepared
        with site.cursor() as cursor:
            assert not isinstance(cursor.cursor, psycopg.ClientCursor)  # the site's own cursors bind on the server
        assert _prepared_count(site) == 0  # a new session: nothing else ran on it
    finally:
        site.close()


def _site(**settings):
    """A second connection to the test database with `settings` over the suite's own."""
    merged = {**connection.settings_dict, **settings}
    return type(connections["default"])(merged, alias="prepare_site")


def _run_prepared(site, times):
    for _ in range(times):
        with statement_cursor(site, server_bound=True, prepared=True) as cursor:
            cursor.execute("SELECT %s::bigint + 1, %s::text", [41, "it's"])
            assert cursor.fetchone() == (42, "it's")


def _prepared_runs(site):
    """(name, runs) of each named statement of `site`'s session, counted by PostgreSQL's own plan counters."""
    site.connection.prepare_threshold = None  # or this statement would be prepared too
    with site.cursor() as cursor:
        cursor.execute("SELECT name, generic_plans + custom_plans FROM pg_prepared_statements ORDER BY name")
        return cursor.fetchall()


def test_a_prepared_statement__is_made_once_and_reused_where_the_site_allows_it():
    """OPTIONS prepare_threshold set and no pooler declared: one named statement, run every time."""
    site = _site(OPTIONS={**connection.settings_dict["OPTIONS"], "prepare_threshold": 5})
    try:
        site.ensure_connection()
        _run_prepared(site, 3)
        assert [runs for _, runs in _prepared_runs(site)] == [3]
    finally:
        site.close()


@pytest.mark.parametrize(
    "settings",
    [
        # Django's default: prepared statements off on every connection, to keep poolers working.
        {"OPTIONS": {k: v for k, v in connection.settings_dict["OPTIONS"].items() if k != "prepare_threshold"}},
        # A transaction pooler declared as Django documents it: the next transaction may reach another
        # server session, which never saw the name.
        {
            "OPTIONS": {**connection.settings_dict["OPTIONS"], "prepare_threshold": 5},
            "DISABLE_SERVER_SIDE_CURSORS": True,
        },
    ],
    ids=["django-default", "transaction-pooler"],
)
def test_a_prepared_statement__goes_unnamed_where_the_site_does_not_allow_it(settings):
    site = _site(**settings)
    try:
        site.ensure_connection()
        _run_prepared(site, 3)
        assert _prepared_runs(site) == []
    finally:
        site.close()


def test_a_prepared_statement__goes_unnamed_while_queries_are_logged_so_the_log_has_its_text():
    site = _site(OPTIONS={**connection.settings_dict["OPTIONS"], "prepare_threshold": 5})
    try:
        site.ensure_connection()
        with CaptureQueriesContext(site) as logged:
            _run_prepared(site, 2)
        assert [q["sql"] for q in logged.captured_queries] == ["SELECT $1::bigint + 1, $2::text"] * 2
        assert _prepared_runs(site) == []
    finally:
        site.close()
