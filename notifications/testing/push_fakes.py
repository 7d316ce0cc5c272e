"""All three provider fakes at once, with their keys, and the PUSH_BACKENDS entries that point at them.

    with PushFakes(directory) as fakes:           # FCM, APNs and Web Push fakes on free (or given) ports
        WEAVE["PUSH_BACKENDS"] = fakes.backends()  # {"fcm": {...}, "apns": {...}, "webpush": {...}}
        fakes.tokens("alice")                      # a live device token per backend for a name

`manage.py fake_push_services` serves this in the foreground for `make run` and the chaos run, and
writes the backends to `<directory>/push_backends.json` for the site's settings to read.
"""

import json
from pathlib import Path
from typing import Any, Self

from notifications.testing.fake_apns import FakeAPNs
from notifications.testing.fake_fcm import FakeFCM
from notifications.testing.fake_webpush import FakeWebPush
from notifications.testing.keys import APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC, FCM_PROJECT_ID, TestKeys

BACKENDS_FILE = "push_backends.json"
TOKENS_FILE = "sample_tokens.json"


class PushFakes:
    def __init__(
        self,
        directory: Path | str,
        *,
        host: str = "127.0.0.1",
        fcm_port: int = 0,
        apns_port: int = 0,
        webpush_port: int = 0,
        fcm_max_streams: int = 1000,
        **faults: Any,
    ) -> None:
        self.directory = Path(directory)
        self.keys = TestKeys.create(self.directory)
        self.fcm = FakeFCM(self.keys, host=host, port=fcm_port, max_streams=fcm_max_streams, **faults)
        self.keys.set_token_uri(self.fcm.token_uri)
        self.apns = FakeAPNs(self.keys, host=host, port=apns_port, **faults)
        self.webpush = FakeWebPush(self.keys, host=host, port=webpush_port, **faults)

    def backends(self) -> dict[str, dict[str, Any]]:
        """The WEAVE["PUSH_BACKENDS"] entries for the three fakes (aliases fcm, apns, webpush)."""
        ca = str(self.keys.ca_file)
        return {
            "fcm": {
                "BACKEND": "notifications.backends.fcm.FCMBackend",
                "OPTIONS": {"project_id": FCM_PROJECT_ID, "credentials_file": str(self.keys.fcm_service_account),
                            "base_url": self.fcm.url, "ca_file": ca, "iid_url": self.fcm.url},
            },
            "apns": {
                "BACKEND": "notifications.backends.apns.APNsBackend",
                "OPTIONS": {"team_id": APNS_TEAM_ID, "key_id": APNS_KEY_ID, "key_file": str(self.keys.apns_key_file),
                            "topic": APNS_TOPIC, "host": self.apns.host_port, "ca_file": ca,
                            "manage_host": self.apns.host_port},
            },
            "webpush": {
                "BACKEND": "notifications.backends.webpush.WebPushBackend",
                "OPTIONS": {"vapid_private_key_file": str(self.keys.vapid_private_key_file),
                            "vapid_subject": "mailto:ops@example.com", "ca_file": ca},
            },
        }  # fmt: skip

    def tokens(self, name: str, *, dead: bool = False) -> dict[str, str]:
        """A device token per backend for `name`; `dead=True` gives tokens each fake refuses as gone."""
        hexed = name.encode().hex()[:56].ljust(56, "0")
        if dead:
            return {
                "fcm": f"dead-{name}-" + "x" * 20,
                "apns": "dead" + hexed.ljust(60, "0"),
                "webpush": self.webpush.subscription(f"gone-{name}").as_token(),
            }
        return {
            "fcm": f"fcm-{name}-" + "a" * 20,
            "apns": "ab" * 4 + hexed,
            "webpush": self.webpush.subscription(name).as_token(),
        }

    def stats(self) -> dict[str, Any]:
        return {"fcm": self.fcm.stats(), "apns": self.apns.stats(), "webpush": self.webpush.stats()}

    def write_backends(self) -> Path:
        """Write PUSH_BACKENDS, and next to it sample device tokens (a live and a dead one per backend)."""
        (self.directory / TOKENS_FILE).write_text(
            json.dumps({"live": self.tokens("demo"), "dead": self.tokens("demo", dead=True)}, indent=2)
        )
        path = self.directory / BACKENDS_FILE
        path.write_text(json.dumps(self.backends(), indent=2))  # written last: its presence means "ready"
        return path

    def start(self) -> Self:
        self.fcm.start()
        self.apns.start()
        self.webpush.start()
        return self

    def stop(self) -> None:
        for fake in (self.fcm, self.apns, self.webpush):
            fake.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
