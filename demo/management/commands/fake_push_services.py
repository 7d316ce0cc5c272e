"""Serve the FCM, APNs and Web Push fakes in the foreground, with freshly generated keys."""

import threading

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
        parser.add_argument("--error", default="", help="an error name each fake answers with --rate probability")
        parser.add_argument("--rate", type=float, default=0.0)
        parser.add_argument("--rate-hang", type=float, default=0.0)
        parser.add_argument("--hang-seconds", type=float, default=5.0)
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args, **o):
        fakes = PushFakes(
            o["dir"], host=o["host"], fcm_port=o["fcm_port"], apns_port=o["apns_port"],
            webpush_port=o["webpush_port"], latency_ms=o["latency_ms"], error=o["error"], rate=o["rate"],
            rate_hang=o["rate_hang"], hang_seconds=o["hang_seconds"], seed=o["seed"],
        )  # fmt: skip
        fakes.start()
        path = fakes.write_backends()
        self.stdout.write(
            f"FCM fake on {fakes.fcm.url}, APNs fake on {fakes.apns.url}, Web Push fake on {fakes.webpush.url}; "
            f"PUSH_BACKENDS in {path} (set WEAVE_PUSH_BACKENDS_FILE to it)"
        )
        self.stdout.flush()  # a parent process waits for this line to know the ports are open
        stop = threading.Event()
        try:
            while not stop.wait(3600):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            fakes.stop()
