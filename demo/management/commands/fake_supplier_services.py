"""Run the fake supplier services (see onboarding.testing.fake_services) until Ctrl-C."""

from django.core.management.base import BaseCommand

from onboarding.testing.fake_services import FakeConfig, FakeSupplierServices


class Command(BaseCommand):
    help = "Run a fake supplier-services HTTP API with idempotency keys, faults and /_stats."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8200)
        parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
        parser.add_argument("--error-rate", type=float, default=0.0, help="share of requests answered 503")
        parser.add_argument("--throttle-rate", type=float, default=0.0, help="share answered 429")
        parser.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds sent with 429")
        parser.add_argument("--hang-rate", type=float, default=0.0, help="share that do the work, then hang")
        parser.add_argument("--hang-seconds", type=float, default=30.0)
        parser.add_argument("--invalid-tax-id", action="append", default=[], help="answer this tax id invalid")
        parser.add_argument("--refused-iban", action="append", default=[], help="refuse this (well-formed) IBAN")
        parser.add_argument("--sanctioned", action="append", default=[], help="a legal name that hits screening")
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args, **o):
        config = FakeConfig(
            latency=o["latency"],
            error_rate=o["error_rate"],
            throttle_rate=o["throttle_rate"],
            retry_after=o["retry_after"],
            hang_rate=o["hang_rate"],
            hang_seconds=o["hang_seconds"],
            invalid_tax_ids=o["invalid_tax_id"],
            refused_ibans=o["refused_iban"],
            sanctioned_names=o["sanctioned"],
            seed=o["seed"],
        )
        server = FakeSupplierServices(o["host"], o["port"], config)
        banner = f"Fake supplier services on {server.url} (GET /_stats, POST /_reset, POST /_config)"
        server.serve_until_interrupted(banner, self._announce)

    def _announce(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()  # a parent process waits for this line to know the port is open
