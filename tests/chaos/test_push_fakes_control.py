"""The chaos run switches the HTTP/2 fakes' faults through a control file (weave_fake_push --control):
the faults apply, and quiet connections are recycled so the next request meets the wire fault."""

import json
import ssl
import threading
import time

import httpx
import pytest

from notifications.management.commands.weave_fake_push import follow_control as _follow
from notifications.testing.push_fakes import PushFakes


@pytest.fixture
def fakes(tmp_path):
    with PushFakes(tmp_path / "fakes") as running:
        yield running


def _wait_for(path, text, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text() == text:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never said {text}")


def test_control_file__a_wire_fault_applies_and_a_quiet_connection_is_recycled_into_it(fakes, tmp_path):
    control = tmp_path / "faults.json"
    stop = threading.Event()
    follower = threading.Thread(target=_follow, args=(fakes, control, stop), daemon=True)
    follower.start()
    try:
        with httpx.Client(http2=True, verify=ssl.create_default_context(cafile=str(fakes.keys.ca_file))) as client:
            assert client.get(f"{fakes.fcm.url}/_stats").status_code == 200  # one spliced connection, kept
            time.sleep(0.7)  # quiet for longer than the recycling threshold
            wanted = json.dumps({"fcm": {"wire": "goaway", "goaway_after": 5}})
            control.write_text(wanted)
            _wait_for(control.with_name("faults.json.applied"), wanted)
            time.sleep(0.2)  # the close runs on the fake's loop

            # The kept connection is gone (closed without a GOAWAY: a client that reuses it learns on use);
            # the next request opens a new one.
            with pytest.raises(httpx.RemoteProtocolError):
                client.get(f"{fakes.fcm.url}/_stats")
            assert client.get(f"{fakes.fcm.url}/_stats").status_code == 200
    finally:
        stop.set()

    assert fakes.fcm.state.faults.wire == "goaway"
    # The second request came on a new connection, served under the wire fault (not the old splice).
    wire = fakes.fcm.stats()["wire"]
    assert (wire["connections"], wire["streams"]) == (1, 1)
