"""A real qcluster through Debian's pgbouncer in transaction pooling mode (started here on a free port).

LISTEN cannot work through transaction pooling: the pooler hands the server session to another client
after each transaction. The watchers find out with a probe and poll due times instead (saying so in
the log), or LISTEN on the direct connection named by WAKE_LISTEN_DB. Either way retries go out
promptly and a killed worker's rows are recovered. Times are on the database clock.
"""

import json
import os
import subprocess
import sys

import pytest
from django.db import connection, connections

from notifications.models import DeliveryAttempt
from tests.e2e.clusters import RECOVERY_MARGIN, RETRY_TARGET, deliver_through_a_503, kill_the_holder, no_sweeps
from tests.e2e.conftest import database_url
from tools import pgbouncer
from tools.processes import PROJECT_ROOT
from weave.models import WatcherProbe

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.needs(None if pgbouncer.available() else "pgbouncer is missing (apt-get install pgbouncer)"),
]


@pytest.fixture
def bouncer():
    s = connection.settings_dict
    with pgbouncer.PgBouncer(upstream_host=s["HOST"] or "127.0.0.1", upstream_port=int(s["PORT"] or 5432)) as running:
        yield running


def pooled_env(worker_env, bouncer, **extra: str) -> dict[str, str]:
    return {
        **worker_env,
        "DATABASE_URL": bouncer.url(connection.settings_dict["NAME"]),
        "DB_TRANSACTION_POOLER": "true",
        **extra,
    }


def _retry_lateness(ids: list[int]) -> list[float]:
    late = []
    for pk in ids:
        first, second = DeliveryAttempt.objects.filter(notification_id=pk).order_by("started_at", "pk")
        assert (first.outcome, second.outcome) == ("temporary", "delivered")
        late.append((second.started_at - first.retry_at).total_seconds())
    return late


@pytest.mark.parametrize("listen", ["poll", "direct"])
def test_through_pgbouncer__a_503_retry_goes_out_within_a_second_of_its_due_time(groups, worker_env, bouncer, listen):
    no_sweeps()
    extra = {"WEAVE_WAKE_LISTEN_DB": database_url()} if listen == "direct" else {}
    cluster, ids, stats = deliver_through_a_503(groups, pooled_env(worker_env, bouncer, **extra), count=4)
    assert stats["unique_deliveries"] == len(ids)
    for late in _retry_lateness(ids):
        assert -0.05 <= late <= RETRY_TARGET, f"retry sent {late:.3f} s after its due time through pgbouncer"
    log = cluster.log_tail(2000)
    modes = set(WatcherProbe.objects.values_list("mode", flat=True))
    if listen == "poll":
        # Never silent: the watchers say they poll, in the log and where the dashboard reads it.
        assert "event=wake_polling" in log and modes == {"poll"}
    else:
        assert "event=wake_polling" not in log and modes == {"listen"}


def test_through_pgbouncer__a_sigkilled_workers_rows_are_finished_within_ttl_plus_3_s(groups, worker_env, bouncer):
    no_sweeps()
    ttl = 5.0
    killed = kill_the_holder(groups, pooled_env(worker_env, bouncer), ttl=ttl)
    finished = DeliveryAttempt.objects.filter(notification_id__in=killed.ids, outcome="delivered")
    assert finished.count() == len(killed.ids) and not finished.filter(owner=killed.owner).exists()
    took = (max(finished.values_list("finished_at", flat=True)) - killed.killed_at).total_seconds()
    assert took <= ttl + RECOVERY_MARGIN, f"recovered {took:.2f} s after the kill through pgbouncer (TTL {ttl:g} s)"
    assert killed.stats["unique_deliveries"] == len(killed.ids)


def test_check_database__warns_when_the_listen_connection_goes_through_a_transaction_pooler(bouncer):
    def check(**env: str) -> str:
        result = subprocess.run(
            [sys.executable, str(PROJECT_ROOT / "manage.py"), "check", "--database", "default"],
            env={**os.environ, "DEBUG": "true", **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        return result.stdout + result.stderr

    pooled = bouncer.url(connection.settings_dict["NAME"])
    assert "weave.W043" in check(DATABASE_URL=pooled, DB_TRANSACTION_POOLER="true")
    assert "weave.W043" not in check(
        DATABASE_URL=pooled, DB_TRANSACTION_POOLER="true", WEAVE_WAKE_LISTEN_DB=database_url()
    )


def _pooled_site(bouncer, alias: str, **settings):
    """A connection to the test database through `bouncer`, with `settings` over the suite's own."""
    import dj_database_url

    parsed = dj_database_url.parse(bouncer.url(connection.settings_dict["NAME"]))
    merged = {**connection.settings_dict, **{k: parsed[k] for k in ("HOST", "PORT", "NAME")}, **settings}
    return type(connections["default"])(merged, alias=alias)


def _run_interleaved(sites, times: int) -> None:
    from weave.leases.binding import statement_cursor

    for _ in range(times):
        for site in sites:
            with statement_cursor(site, server_bound=True, prepared=True) as cursor:
                cursor.execute("SELECT %s::bigint + 1", [1])
                assert cursor.fetchone() == (2,)


@pytest.mark.parametrize("declared", [True, False], ids=["pooler-declared", "pooler-undeclared"])
def test_through_pgbouncer__a_declared_transaction_pooler_gets_no_named_statement(bouncer, declared):
    """Two clients whose transactions share a server session: a named statement would be made twice there
    (or run where it was never made). Declared as Django documents it, the pooler gets none."""
    import psycopg

    options = {**connection.settings_dict["OPTIONS"], "prepare_threshold": 5}
    sites = [
        _pooled_site(bouncer, f"pooled_{i}", OPTIONS=options, DISABLE_SERVER_SIDE_CURSORS=declared) for i in (0, 1)
    ]
    try:
        if declared:
            _run_interleaved(sites, 5)
        else:  # what the guard prevents: the second client's session is the first one's
            with pytest.raises(Exception) as failed:
                _run_interleaved(sites, 5)
            cause = failed.value.__cause__ or failed.value
            assert isinstance(cause, psycopg.errors.DuplicatePreparedStatement | psycopg.errors.InvalidSqlStatementName)
    finally:
        for site in sites:
            site.close()


_SEND_THROUGH_THE_POOLER = """
import contextlib, json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from notifications.services import notification_send_to_user
count, sent = sys.argv[1] == "count", []
for pk in sys.argv[2:]:
    user = get_user_model().objects.get(pk=pk)
    # Counted in the first round only: while queries are logged, nothing is prepared.
    with CaptureQueriesContext(connection) if count else contextlib.nullcontext() as queries:
        with transaction.atomic():
            rows = notification_send_to_user(user=user, title="Hi", body="")
    kinds = [q["sql"].split(None, 1)[0].upper() for q in queries.captured_queries] if count else []
    sent.append({"rows": [[r.pk, r.device_id] for r in rows], "skipped": [s.device_id for s in rows.skipped],
                 "kinds": kinds})
print(json.dumps(sent))
"""


def test_through_pgbouncer__a_send_to_user_in_a_transaction_is_one_statement_and_stores_its_rows(worker_env, bouncer):
    """The one-statement send (and the path that undoes its rows for a token today's checks refuse) runs
    through transaction pooling, where each transaction may reach another server session."""
    from django.contrib.auth import get_user_model

    from notifications.models import Device, Notification

    people = [get_user_model().objects.create_user(f"pooled-{i}") for i in range(6)]
    devices = [Device.objects.create(user=person, backend="default", token=f"pooled-{person.pk}") for person in people]
    legacy = Device.objects.create(user=people[0], backend="default", token="two\nlines")  # before today's checks
    env = {**os.environ, **pooled_env(worker_env, bouncer), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    returned = []
    for mode in ("count", "quiet"):  # the second round unlogged, as a site runs it
        done = subprocess.run(
            [sys.executable, "-c", _SEND_THROUGH_THE_POOLER, mode, *(str(p.pk) for p in people)],
            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        sent = json.loads(done.stdout.strip().splitlines()[-1])
        assert [s["skipped"] for s in sent] == [[legacy.pk]] + [[]] * 5
        assert [[device for _, device in s["rows"]] for s in sent] == [[d.pk] for d in devices]
        if mode == "count":
            # One statement (the drain request follows the commit); for alice, whose legacy token is
            # refused, its rows go and hers goes in again.
            assert [s["kinds"][:3] for s in sent[1:]] == [["BEGIN", "WITH", "COMMIT"]] * 5, sent
            assert sent[0]["kinds"][:3] == ["BEGIN", "WITH", "DELETE"], sent[0]
        returned += [tuple(row) for s in sent for row in s["rows"]]
    assert sorted(Notification.objects.values_list("pk", "device_id")) == sorted(returned)
    assert len(returned) == 12 and not Notification.objects.filter(device=legacy).exists()
