"""Run one of the apps' fake servers as a process whose idempotency store survives a restart.

    python -m tools.chaos.serve push --port 8100 --state /tmp/push.json --rate-5xx 0.07 ...
    python -m tools.chaos.serve supplier --port 8200 --state /tmp/supplier.json --error-rate 0.07 ...

The fakes keep what they have seen in memory. A real provider keeps its idempotency store when it
restarts, so the chaos runner's "restart the fake services" must not wipe it: on SIGTERM this wrapper
writes the whole state to `--state` while holding the fake's own lock, and exits at once (still holding
it, so no request can deliver after the snapshot). The next incarnation loads that file. A request that
was mid-flight sees its connection drop, which is exactly what a restart looks like to a client.

Only the standard library and the fakes are imported: no Django, so it starts fast.
"""

import argparse
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# --- push provider -------------------------------------------------------------------------------


def _push_dump(state: Any) -> dict[str, Any]:
    return {
        "requests": state.requests,
        "per_key": state.per_key,
        "delivered": state.delivered,
        "by_status": state.by_status,
        "tokens": state.tokens,
        "log": state.log,
    }


def _push_load(state: Any, data: dict[str, Any]) -> None:
    state.requests = data["requests"]
    state.per_key = data["per_key"]
    state.delivered = data["delivered"]
    state.by_status = data["by_status"]
    state.tokens = data["tokens"]
    state.log = data["log"]


def _serve_push(args: argparse.Namespace) -> tuple[Any, Any]:
    from notifications.testing.fake_provider import FakePushProvider

    server = FakePushProvider(
        host=args.host,
        port=args.port,
        latency_ms=args.latency_ms,
        rate_429=args.rate_429,
        retry_after=args.retry_after,
        rate_5xx=args.rate_5xx,
        rate_hang=args.rate_hang,
        hang_seconds=args.hang_seconds,
        seed=args.seed,
    )
    state = server._server.state  # the fake's own state object; this wrapper only persists it
    return server, (state, _push_dump, _push_load)


# --- supplier services ---------------------------------------------------------------------------


def _supplier_dump(state: Any) -> dict[str, Any]:
    return {
        "requests": state.requests,
        "replays": state.replays,
        "faults": dict(state.faults),
        "by_endpoint": {name: dict(counts) for name, counts in state.by_endpoint.items()},
        "key_requests": dict(state.key_requests),
        "answers": {key: list(answer) for key, answer in state.answers.items()},
    }


def _supplier_load(state: Any, data: dict[str, Any]) -> None:
    state.requests = data["requests"]
    state.replays = data["replays"]
    state.faults = Counter(data["faults"])
    state.by_endpoint = {name: Counter(counts) for name, counts in data["by_endpoint"].items()}
    state.key_requests = Counter(data["key_requests"])
    state.answers = {key: tuple(answer) for key, answer in data["answers"].items()}


def _serve_supplier(args: argparse.Namespace) -> tuple[Any, Any]:
    from onboarding.testing.fake_services import FakeConfig, FakeSupplierServices

    config = FakeConfig(
        latency=args.latency_ms / 1000,
        error_rate=args.rate_5xx,
        throttle_rate=args.rate_429,
        retry_after=int(float(args.retry_after)),
        hang_rate=args.rate_hang,
        hang_seconds=args.hang_seconds,
        sanctioned_names=args.sanctioned,
        invalid_tax_ids=args.invalid_tax_id,
        refused_ibans=args.refused_iban,
        seed=args.seed,
    )
    server = FakeSupplierServices(args.host, args.port, config)
    return server, (server.state, _supplier_dump, _supplier_load)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["push", "supplier"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True, help="JSON file: loaded at start, written on SIGTERM")
    parser.add_argument("--latency-ms", type=int, default=0)
    parser.add_argument("--rate-429", type=float, default=0.0)
    parser.add_argument("--retry-after", default="1")
    parser.add_argument("--rate-5xx", type=float, default=0.0)
    parser.add_argument("--rate-hang", type=float, default=0.0, help="do the work, then answer too late")
    parser.add_argument("--hang-seconds", type=float, default=5.0)
    parser.add_argument("--sanctioned", action="append", default=[], help="supplier only: a sanctioned name")
    parser.add_argument("--invalid-tax-id", action="append", default=[], help="supplier only: an unregistered tax id")
    parser.add_argument("--refused-iban", action="append", default=[], help="supplier only: a closed account's IBAN")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)

    server, (state, dump, load) = (_serve_push if args.kind == "push" else _serve_supplier)(args)
    if args.state.exists():
        with state.lock:
            load(state, json.loads(args.state.read_text()))

    def stop(signum: int, frame: Any) -> None:
        # Keep the lock until the process is gone: nothing may be delivered after the snapshot.
        state.lock.acquire()
        _write_atomically(args.state, dump(state))
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"chaos fake {args.kind} on http://{args.host}:{args.port} (state {args.state})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
