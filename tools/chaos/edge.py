"""Provider-edge faults for the chaos run: the fakes' hostile modes, switched on for a while and off again.

An edge fault turns on one webhook mode (the HTTP/1.1 fake answering out of turn or losing requests
before delivery) and, when the run has devices, one HTTP/2 mode on the FCM, APNs and Web Push fakes
(refused streams, GOAWAY, a TLS handshake that never finishes, FCM's token endpoint failing). Each
mode has an "off" setting, so a window ends with the fake back to its plain behaviour. The modes
cycle by the fault's number, so a run with as many edge faults as modes runs every one of them.
"""

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

# Webhook fake (notifications.testing.fake_provider.FaultConfig): mode -> settings while it is on.
WEBHOOK_MODES: dict[str, dict[str, Any]] = {
    "extra_answers": {"extra_answers": 1},  # every answer written twice
    "early_answer": {"early_answer": True},  # 202 from the head, then the body refused as a request (400)
    "short_body": {"content_length_delta": -3},  # the body's tail stays on the wire
    "idle_408": {"idle_408_seconds": 0.2},  # an idle kept-alive connection gets a 408 and a close
    "long_body": {"content_length_delta": 10},  # bytes promised that never come
    "drop_before": {"rate_drop_before": 0.3},  # the connection dropped before delivering
}
WEBHOOK_OFF: dict[str, Any] = {
    "extra_answers": 0,
    "early_answer": False,
    "content_length_delta": 0,
    "idle_408_seconds": 0.0,
    "rate_drop_before": 0.0,
}

# HTTP/2 fakes (notifications.testing.fake_state.Faults), by fake: mode -> {fake: settings}.
H2_MODES: dict[str, dict[str, dict[str, Any]]] = {
    "refuse_streams": {name: {"wire": "refuse_streams"} for name in ("fcm", "apns", "webpush")},
    "stall_tls": {name: {"wire": "stall_tls"} for name in ("fcm", "apns", "webpush")},
    "goaway": {name: {"wire": "goaway", "goaway_after": 2} for name in ("fcm", "apns", "webpush")},
    "token_500": {"fcm": {"token_fault": "500"}},
}
H2_OFF: dict[str, dict[str, Any]] = {name: {"wire": "", "token_fault": ""} for name in ("fcm", "apns", "webpush")}


def modes_for(index: int, *, h2: bool) -> tuple[str, str]:
    """(webhook mode, HTTP/2 mode or "") of the `index`-th edge fault."""
    webhook = list(WEBHOOK_MODES)[index % len(WEBHOOK_MODES)]
    return webhook, (list(H2_MODES)[index % len(H2_MODES)] if h2 else "")


def configure_webhook(port: int, settings: dict[str, Any]) -> None:
    """Change the webhook fake's faults through its control endpoint (exempt from its hostile modes)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/_config",
        data=json.dumps(settings).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (our own local fake)
        response.read()


def configure_h2(control: Path, settings: dict[str, dict[str, Any]], *, timeout: float = 10.0) -> bool:
    """Hand the HTTP/2 fakes new faults through their control file; True once they report them applied."""
    tmp = control.with_suffix(".tmp")
    wanted = json.dumps(settings)
    tmp.write_text(wanted)
    os.replace(tmp, control)
    applied = control.with_name(control.name + ".applied")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if applied.read_text() == wanted:
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return False


def h2_effects(provider_fakes: dict[str, Any]) -> dict[str, Any]:
    """What the HTTP/2 faults did at the fakes: streams refused, handshakes stalled, token requests."""
    wire = {name: (stats.get("wire") or {}) for name, stats in provider_fakes.items()}
    return {
        "refused_streams": sum(int(w.get("refused", 0)) for w in wire.values()),
        "tls_stalled": sum(int(w.get("tls_stalled", 0)) for w in wire.values()),
        "token_requests": (provider_fakes.get("fcm") or {}).get("token_requests"),
    }
