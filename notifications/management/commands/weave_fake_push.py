"""Serve local fakes of the push providers in the foreground, and say how to point a site at them.

The webhook provider needs nothing beyond the core; the FCM, APNs and Web Push fakes (HTTP/2 over TLS,
with keys and a test CA generated into --dir) need the [testing] extra. A site's own tests and CI start
this command, read the settings it prints (or `<dir>/weave_settings.json`), and send to the fakes.
"""

import json
import threading
from argparse import ArgumentParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from notifications.testing.fake_provider import FakePushProvider
from weave.extras import install_hint, missing_modules

if TYPE_CHECKING:
    from notifications.testing.push_fakes import PushFakes

SETTINGS_FILE = "weave_settings.json"
SERVE = ("all", "webhook", "http2")


class Command(BaseCommand):
    help = (
        "Serve local fakes of the push providers: the webhook provider, and FCM v1, APNs and a Web Push service "
        "(HTTP/2 over TLS with generated keys; the [testing] extra). Prints each URL and the WEAVE settings that "
        "point a site at them, and writes those settings to <dir>/weave_settings.json. Ctrl-C stops them."
    )
    serve_default = "all"
    # The fakes start before the site is pointed at them: a site's unfinished settings must not stop them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--serve", choices=SERVE, default=self.serve_default, help="which fakes to serve")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8100, help="the webhook fake's port; 0 picks a free port")
        parser.add_argument("--fcm-port", type=int, default=8101, help="0 picks a free port")
        parser.add_argument("--apns-port", type=int, default=8102, help="0 picks a free port")
        parser.add_argument("--webpush-port", type=int, default=8103, help="0 picks a free port")
        parser.add_argument("--dir", default=".run/push-fakes", help="where keys and the settings files go")
        parser.add_argument("--token", default=None, help="the webhook fake accepts only this bearer token (else 401)")
        parser.add_argument("--latency-ms", type=int, default=0, help="added to every answer")
        parser.add_argument("--rate-hang", type=float, default=0.0, help="deliver, then answer after --hang-seconds")
        parser.add_argument("--hang-seconds", type=float, default=5.0)
        parser.add_argument("--seed", type=int, default=None)
        webhook = parser.add_argument_group("webhook faults")
        webhook.add_argument("--rate-429", type=float, default=0.0)
        webhook.add_argument("--retry-after", default="1", help='seconds, or "date:<seconds>" for an HTTP-date')
        webhook.add_argument("--rate-5xx", type=float, default=0.0)
        webhook.add_argument("--status-5xx", type=int, default=503)
        webhook.add_argument("--rate-drop", type=float, default=0.0, help="deliver, then drop the connection")
        http2 = parser.add_argument_group("FCM, APNs and Web Push faults")
        http2.add_argument("--error", default="", help="an error name each fake answers with --rate probability")
        http2.add_argument("--rate", type=float, default=0.0)
        http2.add_argument(
            "--fcm-max-streams", type=int, default=1000,
            help="SETTINGS_MAX_CONCURRENT_STREAMS of the FCM fake's connections (FCM's own front ends: 100)",
        )  # fmt: skip
        http2.add_argument(
            "--control",
            default="",
            help='a JSON file {"fcm": {...}, "apns": {...}, "webpush": {...}} of faults, applied each time it changes',
        )

    def handle(self, *args: Any, **o: Any) -> None:
        serve = self._what_to_serve(o["serve"])
        directory = Path(o["dir"]).resolve()
        webhook = self._webhook(o) if serve in ("all", "webhook") else None
        fakes = self._http2(directory, o) if serve in ("all", "http2") else None
        stop = threading.Event()
        try:
            if webhook is not None:
                webhook.start()
            if fakes is not None:
                fakes.start()
                fakes.write_backends()
            self._print_addresses(directory, webhook, fakes, o["token"])
            if fakes is not None and o["control"]:
                threading.Thread(target=follow_control, args=(fakes, Path(o["control"]), stop), daemon=True).start()
            while not stop.wait(3600):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            if fakes is not None:
                fakes.stop()
            if webhook is not None:
                webhook.stop()

    def _what_to_serve(self, serve: str) -> str:
        missing = missing_modules("testing")
        if not missing or serve == "webhook":
            return serve
        if serve == "http2":
            raise CommandError(f"The FCM, APNs and Web Push fakes need the [testing] extra. {install_hint('testing')}")
        self.stderr.write(
            f"Serving the webhook fake only: the FCM, APNs and Web Push fakes need the [testing] extra "
            f"({', '.join(missing)} cannot be imported). {install_hint('testing')}"
        )
        return "webhook"

    def _webhook(self, o: dict[str, Any]) -> FakePushProvider:
        return FakePushProvider(
            host=o["host"], port=o["port"], latency_ms=o["latency_ms"], rate_429=o["rate_429"],
            retry_after=o["retry_after"], rate_5xx=o["rate_5xx"], status_5xx=o["status_5xx"],
            rate_hang=o["rate_hang"], hang_seconds=o["hang_seconds"], rate_drop=o["rate_drop"],
            token=o["token"], seed=o["seed"],
        )  # fmt: skip

    def _http2(self, directory: Path, o: dict[str, Any]) -> "PushFakes":
        from notifications.testing.push_fakes import BACKENDS_FILE, PushFakes

        (directory / BACKENDS_FILE).unlink(missing_ok=True)  # its presence means "ready"
        (directory / SETTINGS_FILE).unlink(missing_ok=True)
        return PushFakes(
            directory, host=o["host"], fcm_port=o["fcm_port"], apns_port=o["apns_port"],
            webpush_port=o["webpush_port"], latency_ms=o["latency_ms"], error=o["error"], rate=o["rate"],
            rate_hang=o["rate_hang"], hang_seconds=o["hang_seconds"], seed=o["seed"],
            fcm_max_streams=o["fcm_max_streams"],
        )  # fmt: skip

    def _print_addresses(
        self, directory: Path, webhook: FakePushProvider | None, fakes: "PushFakes | None", token: str | None
    ) -> None:
        """Print where each fake listens and the settings that reach them; write the same as JSON."""
        site: dict[str, Any] = {}
        lines = ["Fake push services are up (Ctrl-C stops them):"]
        if webhook is not None:
            lines.append(f"  webhook   {webhook.push_url}   (GET {webhook.url}/_stats)")
            site["PUSH_URL"] = webhook.push_url
            site["PUSH_TOKEN"] = token or "fake-token"  # the fake accepts any token unless --token is given
        if fakes is not None:
            for name in ("fcm", "apns", "webpush"):
                lines.append(f"  {name:<9} {getattr(fakes, name).url}   (HTTP/2 over TLS, CA {fakes.keys.ca_file})")
            site["PUSH_BACKENDS"] = fakes.backends()
            # The Web Push fake listens on 127.0.0.1, which Web Push refuses unless this is on: local runs only.
            site["PUSH_WEBPUSH_UNSAFE_ALLOW_LOOPBACK"] = True
        directory.mkdir(parents=True, exist_ok=True)
        settings_file = directory / SETTINGS_FILE
        settings_file.write_text(json.dumps(site, indent=2))
        lines += ["", "Point a site at them (local runs and tests only), in its WEAVE dict:"]
        lines += [f"  {key!r}: {_shown(key, value, directory)}," for key, value in site.items()]
        lines += [f"All of it as JSON: {settings_file}  (WEAVE.update(json.loads(Path(...).read_text())))"]
        if webhook is not None:
            lines += ["For settings that read the environment, as the README's quickstart does:"]
            lines += [f"  export PUSH_URL={site['PUSH_URL']} PUSH_TOKEN={site['PUSH_TOKEN']}"]
        if fakes is not None:
            lines.append(f"Device tokens each fake accepts (and refuses as gone): {directory / 'sample_tokens.json'}")
        self.stdout.write("\n".join(lines))
        self.stdout.flush()  # a parent process waits for these lines to know the ports are open


def _shown(key: str, value: Any, directory: Path) -> str:
    if key == "PUSH_BACKENDS":
        return f"json.loads(Path({str(directory / 'push_backends.json')!r}).read_text())"
    return repr(value)


def follow_control(fakes: "PushFakes", control: Path, stop: threading.Event) -> None:
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
