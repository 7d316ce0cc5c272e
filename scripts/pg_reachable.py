"""Exit 0 if the PostgreSQL server in the URL given as argv[1] accepts a connection."""

import sys

import dj_database_url
import psycopg

db = dj_database_url.parse(sys.argv[1])
try:
    # The maintenance database: the test run creates its own test_<name> database.
    psycopg.connect(
        dbname="postgres",
        user=db["USER"] or None,
        password=db["PASSWORD"] or None,
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        connect_timeout=3,
    ).close()
except psycopg.OperationalError:
    sys.exit(1)
