"""Bench-only: one push worker's CPU per 1,000 webhook pushes, lean HTTP/1.1 transport against httpcore.

    DATABASE_URL=postgres://... WEAVE_PUSH_URL=http://127.0.0.1:8177/push \\
        python bench/edge_transport.py --transport httpcore --n 2000

Runs `bench/worker_cpu.py` unchanged, except that with `--transport httpcore` the webhook client is
built on httpx's own transport (httpcore and h11, with their pool and readability probe) instead of
`notifications.backends.transport.LeanTransport`. Both clients keep no cookies and never follow redirects,
so the difference is the wire layer only. The result decides whether the hand-written framing earns its keep.
"""

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _use_httpcore() -> None:
    import httpx

    from notifications.backends import http

    original = http.make_client

    def make_client(*, timeout: float, concurrency: int, http2: bool = False, verify: Any = True, **extra: Any):
        if http2:
            return original(timeout=timeout, concurrency=concurrency, http2=True, verify=verify, **extra)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        return http.PushClient(
            timeout=httpx.Timeout(timeout), follow_redirects=False, verify=verify, limits=limits, **extra
        )

    http.make_client = make_client


if __name__ == "__main__":
    transport = "lean"
    if "--transport" in sys.argv:
        at = sys.argv.index("--transport")
        transport = sys.argv[at + 1]
        del sys.argv[at : at + 2]
    import bench.worker_cpu as worker_cpu  # sets up Django

    if transport == "httpcore":
        _use_httpcore()
    elif transport != "lean":
        raise SystemExit("--transport is lean or httpcore")
    worker_cpu.main()
