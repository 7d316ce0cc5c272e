"""`PooledRedis`: django-q2's Redis broker on one client per process with connect and read timeouts (the
stock one connects per `async_task`), so an unreachable Redis fails an enqueue in seconds. `redis` is optional."""

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
    """This process's Redis client from Q_CLUSTER['redis'], per process id (a forked worker builds its own)."""
    key = (os.getpid(), repr(Conf.REDIS))
    with _pool_lock:
        if key not in _pools:
            bounds = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT, "socket_timeout": REDIS_SOCKET_TIMEOUT}
            _pools.clear()  # a parent's client (inherited over fork) or an old configuration's: unused
            if isinstance(Conf.REDIS, str):
                _pools[key] = redis.Redis.from_url(Conf.REDIS, **bounds)
            else:
                _pools[key] = redis.Redis(**{**bounds, **(Conf.REDIS or {})})
        return _pools[key]


class PooledRedis(Redis):  # type: ignore[misc]  # django-q2 ships no type hints
    """django-q2's Redis broker on this process's shared client."""

    @staticmethod
    def get_connection(list_key: str | None = None) -> redis.Redis:
        return shared_redis()
