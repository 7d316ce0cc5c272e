"""Bench-only: the hand-over cost of `notification_create` in the caller's process (wall time per notification).

    BENCH_DATABASE_URL=postgres://... python bench/handover.py --n 500

One at a time (each call its own transaction, as a view sending one push does) and in bulk (N calls in
one transaction). No cluster runs: what is measured is the caller's share only (the INSERT, the
coalesced drain request, the broker's enqueue when that request wins).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=500)
    args = parser.parse_args()
    harness.configure()
    from django.db import transaction

    from bench.product import reset
    from notifications.services import notification_create

    for mode in ("one at a time", "bulk"):
        reset()
        started = time.perf_counter()
        if mode == "bulk":
            with transaction.atomic():
                for i in range(args.n):
                    notification_create(device_token=f"h-{i}", title="hand-over", body="")
        else:
            for i in range(args.n):
                notification_create(device_token=f"h-{i}", title="hand-over", body="")
        per = (time.perf_counter() - started) / args.n * 1000
        print(f"notification_create, {mode}: {per:.3f} ms per notification (n={args.n}); target <= 0.5 ms", flush=True)


if __name__ == "__main__":
    main()
