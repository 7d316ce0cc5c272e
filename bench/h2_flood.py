"""Bench-only: a healthy HTTP/2 origin's latency while another origin floods frames that carry no answer.

    python bench/h2_flood.py [--h2transport path/to/h2transport.py] [--rounds 8]

One event loop, two backends, as in a push worker: FCM against the FCM fake (healthy) and APNs against
the APNs fake under the wire fault "flood_ping_held" (each request held, then PINGs as fast as the fake
can write them, on every connection it is given, a new request opening a new connection as the last
one is lost). Prints the healthy origin's per-request latency (p50, p99) in rounds of 20 concurrent
pushes, first alone, then with the flood, and how many flooded connections the client closed.
`--h2transport` loads another version of `notifications/backends/h2transport.py` in its place (for a
before/after in one run). Both fakes run in threads of this process, so they share its GIL: the
numbers compare runs of this script, not a worker against a remote attacker.
"""

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def _load_h2transport(path: str) -> None:
    spec = importlib.util.spec_from_file_location("notifications.backends.h2transport", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["notifications.backends.h2transport"] = module
    spec.loader.exec_module(module)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--h2transport", default="")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--flood-seconds", type=float, default=20.0, help="stop measuring under the flood after this")
    args = parser.parse_args()
    if args.h2transport:
        _load_h2transport(args.h2transport)
    import django

    django.setup()
    from notifications.backends.apns import APNsBackend
    from notifications.backends.base import PushMessage
    from notifications.backends.fcm import FCMBackend
    from notifications.testing.fake_apns import FakeAPNs
    from notifications.testing.fake_fcm import FakeFCM
    from notifications.testing.keys import APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC, FCM_PROJECT_ID, TestKeys

    keys = TestKeys.create(Path(tempfile.mkdtemp(prefix="h2-flood-")))

    def message(token: str) -> PushMessage:
        return PushMessage(idempotency_key=str(uuid.uuid4()), token=token, title="Hello", body="World")

    async def one(backend, token: str) -> float:
        started = time.perf_counter()
        result = await backend.send(message(token))
        assert result.outcome.value == "delivered", result.reason
        return time.perf_counter() - started

    async def round_of(backend) -> list[float]:
        return list(await asyncio.gather(*(one(backend, "fcm-token-" + "a" * 40) for _ in range(20))))

    async def scenario(fcm, apns) -> dict:
        fcm_options = {"project_id": FCM_PROJECT_ID, "credentials_file": str(keys.fcm_service_account),
                       "base_url": fcm.url, "ca_file": str(keys.ca_file)}  # fmt: skip
        apns_options = {"team_id": APNS_TEAM_ID, "key_id": APNS_KEY_ID, "key_file": str(keys.apns_key_file),
                        "topic": APNS_TOPIC, "host": apns.host_port, "ca_file": str(keys.ca_file)}  # fmt: skip
        healthy = FCMBackend(alias="fcm", options=fcm_options, timeout=10.0, concurrency=20)
        attacker = APNsBackend(alias="apns", options=apns_options, timeout=10.0, concurrency=10)
        try:
            await round_of(healthy)
            alone = [t for _ in range(args.rounds) for t in await round_of(healthy)]
            stop = asyncio.Event()
            attacks: list = []

            async def attack() -> None:
                while not stop.is_set():
                    attacks.append(await attacker.send(message("ab" * 32)))

            task = asyncio.ensure_future(attack())
            while apns.stats()["wire"]["flood_frames"] == 0:
                await asyncio.sleep(0.01)
            flooded: list[float] = []
            until = time.monotonic() + args.flood_seconds
            while len(flooded) < 20 * args.rounds and time.monotonic() < until:
                flooded += await round_of(healthy)
            stop.set()
            try:
                await asyncio.wait_for(task, 15)
            except TimeoutError:
                task.cancel()
            wire = apns.stats()["wire"]
            return {
                "h2transport": args.h2transport or "this tree",
                "alone_p50_ms": round(statistics.median(alone) * 1000, 2),
                "alone_p99_ms": round(sorted(alone)[int(len(alone) * 0.99) - 1] * 1000, 2),
                "flooded_p50_ms": round(statistics.median(flooded) * 1000, 2),
                "flooded_p99_ms": round(sorted(flooded)[int(len(flooded) * 0.99) - 1] * 1000, 2),
                "p50_ratio": round(statistics.median(flooded) / statistics.median(alone), 2),
                "healthy_pushes_under_flood": len(flooded),
                "attacker_requests": len(attacks),
                "attacker_outcomes": sorted({r.outcome.value for r in attacks}),
                "flood_frames_written": wire["flood_frames"],
                "flooded_connections_closed_by_client": len(wire["goaway_codes"]),
            }
        finally:
            await healthy.aclose()
            await attacker.aclose()

    with FakeFCM(keys) as fcm, FakeAPNs(keys) as apns:
        keys.set_token_uri(fcm.token_uri)
        apns.configure(wire="flood_ping_held")
        print(json.dumps(asyncio.run(scenario(fcm, apns)), indent=2))


if __name__ == "__main__":
    main()
