"""Enqueue cost of a `django.tasks` task on `WeaveBackend`: 3,000 enqueues in one transaction, rolled back.

Run from a checkout against a migrated PostgreSQL (or SQLite) database; prints one JSON line with the
median milliseconds per enqueue over the rounds. Two checkouts run alternately (A, B, A, B, ...) on the
same database give the ratio of one change side by side, as in bench/results/2026-12-06-created-at.md:

    DATABASE_URL=postgres://... DJANGO_SETTINGS_MODULE=tests.settings PYTHONPATH=. \\
        python bench/enqueue_clock.py --rounds 5 --n 3000
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from weave.tasks.compat import task  # noqa: E402


@task()
def add(a: int, b: int) -> int:
    """Only enqueued here, never run: the hand-over is what is measured."""
    return a + b


class _Rollback(Exception):
    pass


def one_round(n: int) -> float:
    """Seconds per enqueue of `n` enqueues in one transaction (rolled back: the table stays as it was)."""
    started = 0.0
    took = 0.0
    try:
        with transaction.atomic():
            started = time.perf_counter()
            for i in range(n):
                add.enqueue(i, 1)
            took = time.perf_counter() - started
            raise _Rollback
    except _Rollback:
        pass
    return took / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    one_round(200)  # warm up: the statement's text, the connection, the prepared statement
    rounds = [one_round(args.n) * 1000 for _ in range(args.rounds)]
    print(json.dumps({"vendor": connection.vendor, "n": args.n, "ms_per_enqueue": statistics.median(rounds)}))


if __name__ == "__main__":
    main()
