"""Serve the FCM, APNs and Web Push fakes in the foreground, with freshly generated keys."""

import json
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from notifications.testing.push_fakes import PushFakes


class Command(BaseCommand):
    help = (
        "Run local fakes of FCM v1, APNs and a Web Push service (HTTP/2 over TLS with a generated CA); "
        "write the matching WEAVE PUSH_BACKENDS to <dir>/push_backends.json. Ctrl-C stops them."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dir", default=".run/push-fakes", help="where keys and push_backends.json go")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--fcm-port", type=int, default=8101)
        parser.add_argument("--apns-port", type=int, default=8102)
        parser.add_argument("--webpush-port", type=int, default=8103)
        parser.add_argument("--latency-ms", type=int, default=0)
        parser.add_argument(
            "--fcm-max-streams", type=int, default=1000,
            help="SETTINGS_MAX_CONCURRENT_STREAMS of the FCM fake's connections (FCM's own front ends: 100)",
        )  # fmt: skip
        parser.add_argument("--error", default="", help="an error name each fake answers with --rate probability")
        parser.add_argument("--rate", type=float, default=0.0)
        parser.add_argument("--rate-hang", type=float, default=0.0)
        parser.add_argument("--hang-seconds", type=float, default=5.0)
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument(
            "--control",
            default="",
            help='a JSON file {"fcm": {...}, "apns": {...}, "webpush": {...}} of faults, applied each time it changes',
        )

    def handle(self, *args, **o):
        fakes = PushFakes(
            o["dir"], host=o["host"], fcm_port=o["fcm_port"], apns_port=o["apns_port"],
            webpush_port=o["webpush_port"], latency_ms=o["latency_ms"], error=o["error"], rate=o["rate"],
            rate_hang=o["rate_hang"], hang_seconds=o["hang_seconds"], seed=o["seed"],
            fcm_max_streams=o["fcm_max_streams"],
        )  # fmt: skip
        fakes.start()
        path = fakes.write_backends()
        self.stdout.write(
            f"FCM fake on {fakes.fcm.url}, APNs fake on {fakes.apns.url}, Web Push fake on {fakes.webpush.url}; "
            f"PUSH_BACKENDS in {path} (set WEAVE_PUSH_BACKENDS_FILE to it)"
        )
        self.stdout.flush()  # a parent process waits for this line to know the ports are open
        stop = threading.Event()
        if o["control"]:
            threading.Thread(target=_follow, args=(fakes, Path(o["control"]), stop), daemon=True).start()
        try:
            while not stop.wait(3600):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            fakes.stop()


def _follow(fakes: PushFakes, control: Path, stop: threading.Event) -> None:
    """Apply the control file's faults whenever it changes (another process switches faults on and off).

    The file is replaced atomically by its writer; once applied, its content is copied next to it
    as `<name>.applied`, so the writer can tell the faults are live."""
    seen: Any = None
    while not stop.wait(0.05):
        try:
            stamp = control.stat().st_mtime_ns
        except FileNotFoundError:
            continue
        if stamp == seen:
            continue
        seen = stamp
        try:
            wanted = json.loads(control.read_text())
            for name, faults in wanted.items():
                fake = getattr(fakes, name)
                fake.configure(**faults)
                if faults.get("wire"):  # a wire fault meets new connections: recycle the quiet ones
                    fake.server.close_quiet_connections()
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            print(f"control file {control}: {exc}", flush=True)
            continue
        applied = control.with_name(control.name + ".applied")
        applied.write_text(json.dumps(wanted))
