"""`PooledRedis`: django-q2's Redis broker on one connection pool per process (`Q_CLUSTER['broker_class']`).

The stock broker builds a new client, and so a new TCP connection, for every `async_task`; under steady
traffic that is one socket per enqueue left in TIME_WAIT. This one shares one client per process and
bounds connect and read times, so an unreachable Redis fails an enqueue in seconds instead of blocking
the caller. Its own module because `redis` is an optional dependency (`weave[redis]`).
"""

import os
import threading

import redis
from django_q.brokers.redis_broker import Redis
from django_q.conf import Conf

# Bounds for the pooled client unless the site's Q_CLUSTER['redis'] dict sets its own.
REDIS_CONNECT_TIMEOUT = 2.0
REDIS_SOCKET_TIMEOUT = 5.0

_pools: dict[tuple[int, str], redis.Redis] = {}
_pool_lock = threading.Lock()


def shared_redis() -> redis.Redis:
    """This process's Redis client (one connection pool), built from Q_CLUSTER['redis'] on first use.

    Keyed by process id (a forked worker builds its own instead of sharing its parent's sockets) and
    by the configuration (a test that points django-q2 at another Redis gets a client for it).
    """
    key = (os.getpid(), repr(Conf.REDIS))
    client = _pools.get(key)
    if client is not None:
        return client
    with _pool_lock:
        client = _pools.get(key)
        if client is None:
            bounds = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT, "socket_timeout": REDIS_SOCKET_TIMEOUT}
            if isinstance(Conf.REDIS, str):
                client = redis.Redis.from_url(Conf.REDIS, **bounds)
            else:
                client = redis.Redis(**{**bounds, **(Conf.REDIS or {})})
            _pools.clear()  # a parent's client (inherited over fork) or an old configuration's: unused
            _pools[key] = client
    return client


class PooledRedis(Redis):  # type: ignore[misc]  # django-q2 ships no type hints
    """django-q2's Redis broker on this process's shared client."""

    @staticmethod
    def get_connection(list_key: str | None = None) -> redis.Redis:
        return shared_redis()
