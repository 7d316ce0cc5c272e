"""Serve the fake push provider in the foreground (for the demo, benchmarks and manual testing)."""

from django.core.management.base import BaseCommand

from notifications.testing.fake_provider import FakePushProvider


class Command(BaseCommand):
    help = "Run a fake push provider: a real HTTP server with injectable faults (Ctrl-C stops it)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8100, help="0 picks a free port")
        parser.add_argument("--latency-ms", type=int, default=0)
        parser.add_argument("--rate-429", type=float, default=0.0)
        parser.add_argument("--retry-after", default="1", help='seconds, or "date:<seconds>" for an HTTP-date')
        parser.add_argument("--rate-5xx", type=float, default=0.0)
        parser.add_argument("--status-5xx", type=int, default=503)
        parser.add_argument("--rate-hang", type=float, default=0.0, help="deliver, then answer after --hang-seconds")
        parser.add_argument("--hang-seconds", type=float, default=5.0)
        parser.add_argument("--rate-drop", type=float, default=0.0, help="deliver, then drop the connection")
        parser.add_argument("--token", default=None, help="accept only this bearer token (others get 401)")
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args, **o):
        server = FakePushProvider(
            host=o["host"],
            port=o["port"],
            latency_ms=o["latency_ms"],
            rate_429=o["rate_429"],
            retry_after=o["retry_after"],
            rate_5xx=o["rate_5xx"],
            status_5xx=o["status_5xx"],
            rate_hang=o["rate_hang"],
            hang_seconds=o["hang_seconds"],
            rate_drop=o["rate_drop"],
            token=o["token"],
            seed=o["seed"],
        )
        banner = f"Fake push provider on {server.push_url} (stats: {server.url}/_stats)"
        server.serve_until_interrupted(banner, self._announce)

    def _announce(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()  # a parent process waits for this line to know the port is open
