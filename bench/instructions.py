"""Bench-only: instructions the caller's process runs per hand-over call, counted by callgrind.

    BENCH_DATABASE_URL=postgres://... python bench/instructions.py [--tree ../other-checkout] [--small 100 --large 500]
        [--mode "send_to_user" ...]

Wall time and CPU per call move with whatever else the two cores are doing (a bare round trip to
PostgreSQL took 0.2 to 0.4 ms in one minute here); an instruction count does not. Each measurement
runs a child process under `valgrind --tool=callgrind` that makes `--small` calls, then one that makes
`--large`, each in one transaction (the bulk mode of `bench/handover.py`, rolled back at the end) or
one at a time (each call committing by itself, the rows deleted afterwards), and
reports (large - small) / (large - small calls): the start-up, imports and first-call costs cancel.
PostgreSQL's own work is in its server process and not counted; psycopg's and libpq's are.

`--tree` adds another checkout (a worktree of an earlier commit, say), measured the same way in the same
run with this checkout's interpreter, so two versions of the code can be compared side by side.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("create", "send_to_user", "create, one at a time", "send_to_user, one at a time")
USERS = "handover-"  # made by bench.handover.users


def child(tree: str, mode: str, n: int) -> None:
    """Make `n` calls of `mode` in one transaction with the code of `tree`, then roll back."""
    sys.path.insert(0, tree)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from notifications.services import notification_create, notification_send_to_user

    # Every bench user, whatever `n`: a cost the same in the small run and the large, so it cancels.
    people = list(get_user_model().objects.filter(username__startswith=USERS).order_by("pk"))

    def calls() -> None:
        for i in range(n):
            if mode.startswith("create"):
                notification_create(device_token=f"i-{i}", title="hand-over", body="")
            else:
                notification_send_to_user(user=people[i], title="hand-over", body="")

    if mode.endswith("one at a time"):
        calls()  # each call commits by itself, as a view sending one push does; the parent deletes the rows
        return
    with transaction.atomic():
        calls()
        transaction.set_rollback(True)


def counted(tree: str, mode: str, n: int) -> int:
    """Instructions of one child process making `n` calls."""
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, __file__, "--child", tree, mode, str(n),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind run failed ({tree}, {mode}, {n}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], help="another checkout to measure beside this one")
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=500)
    parser.add_argument("--mode", action="append", choices=MODES, help="only this mode (repeatable; default: all)")
    parser.add_argument("--child", nargs=3, metavar=("TREE", "MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tree, mode, n = args.child
        child(tree, mode, int(n))
        return
    sys.path.insert(0, str(ROOT))
    from bench import harness
    from bench.handover import users
    from bench.product import reset

    harness.configure()
    users(args.large)  # one device each, for the fan-out calls
    trees = [str(ROOT), *(str(Path(t).resolve()) for t in args.tree)]
    calls = args.large - args.small
    for mode in args.mode or MODES:
        for tree in trees:
            per_call = (counted(tree, mode, args.large) - counted(tree, mode, args.small)) / calls
            reset()  # the rows the one-at-a-time children committed
            print(f"{mode:<14} {tree:<40} {per_call / 1000:,.1f} K instructions per call", flush=True)


if __name__ == "__main__":
    main()
