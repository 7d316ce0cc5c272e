"""Serve the fake supplier services (onboarding.testing.fake_services) in the foreground, and say how to point
a site at them."""

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from onboarding.testing.fake_services import MODES, FakeConfig, FakeSupplierServices


class Command(BaseCommand):
    help = (
        "Serve a fake of the supplier services (tax id, bank account, screening, ERP) with idempotency keys, "
        "faults and /_stats, for a site's own tests and local runs; prints the WEAVE['SUPPLIER_API_URL'] that "
        "points a site at it. Ctrl-C stops it."
    )
    # The fake starts before the site is pointed at it: a site's unfinished settings must not stop it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8200, help="0 picks a free port")
        parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
        parser.add_argument("--error-rate", type=float, default=0.0, help="share of requests answered 503")
        parser.add_argument("--throttle-rate", type=float, default=0.0, help="share answered 429")
        parser.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds sent with 429")
        parser.add_argument("--hang-rate", type=float, default=0.0, help="share that do the work, then hang")
        parser.add_argument("--hang-seconds", type=float, default=30.0)
        parser.add_argument("--invalid-tax-id", action="append", default=[], help="answer this tax id invalid")
        parser.add_argument("--refused-iban", action="append", default=[], help="refuse this (well-formed) IBAN")
        parser.add_argument("--sanctioned", action="append", default=[], help="a legal name that hits screening")
        parser.add_argument("--mode", choices=MODES, default="", help="a hostile answer (see fake_services)")
        parser.add_argument("--mode-rate", type=float, default=1.0, help="share of requests given --mode")
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, **o: Any) -> None:
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
            mode=o["mode"],
            mode_rate=o["mode_rate"],
            seed=o["seed"],
        )
        server = FakeSupplierServices(o["host"], o["port"], config)
        banner = (
            f"Fake supplier services on {server.url} (GET /_stats, POST /_reset, POST /_config); Ctrl-C stops it.\n"
            f"Point a site at it (local runs and tests only), in its WEAVE dict:\n"
            f"  'SUPPLIER_API_URL': {server.url!r},\n"
            f"For settings that read the environment, as the README's quickstart does:\n"
            f"  export SUPPLIER_API_URL={server.url}"
        )
        server.serve_until_interrupted(banner, self._print_line)

    def _print_line(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()  # a parent process waits for this line to know the port is open
