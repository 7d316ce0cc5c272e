"""The bounded chaos run: real qcluster process groups, faulty fake servers, a kill, stops, a restart; every invariant.

The full-size run is `make chaos`; this one is small enough for CI (about a minute on two cores).
"""

import pytest

from tools.chaos.config import ChaosConfig
from tools.chaos.edge import H2_MODES
from tools.chaos.faults import DB_RESTART, EDGE, KILL, PARTITION, STOP
from tools.chaos.runner import ChaosRunner

from .conftest import database_url, free_port


def three_free_ports() -> int:
    """A port p with p, p + 1 and p + 2 free (the three provider fakes), found by binding them."""
    import socket

    for _ in range(50):
        base = free_port()
        sockets = []
        try:
            for offset in range(3):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no three consecutive free ports")


pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_chaos__every_invariant_holds_under_kills_stops_restarts_partitions_and_provider_edge_faults(tmp_path, capsys):
    config = ChaosConfig(
        # Small: the runner tops the load up while faults are still due, however fast the workers drain it.
        notifications=600,
        runs=16,
        clusters=3,
        kills=1,
        stops=2,
        restarts=1,
        partitions=1,
        db_restarts=1,  # every cluster's PostgreSQL sessions end at once, as in a server restart
        # Early in the load and close together, with slower sends (more leases held at any instant):
        # every fault must land on a lease holder while there is still work to disturb.
        fault_window=(0.02, 0.35),
        fault_gap=2.0,
        latency_ms=100,
        seed=5,
        deadline=150,
        push_port=free_port(),
        supplier_port=free_port(),
        log_dir=tmp_path / "chaos",
        progress=False,
        # Issue 11: devices on the FCM, APNs and Web Push fakes, some dead, some sends expiring.
        devices=30,
        push_fakes_port=three_free_ports(),
        # Provider-edge faults: four windows, each one webhook mode (extra answers, an early answer, a short
        # body, an unsolicited 408) and one HTTP/2 mode (refused streams, a stalled TLS handshake, GOAWAY,
        # FCM's token endpoint failing), with sends to devices as each begins.
        edge_faults=4,
        edge_seconds=2.5,
    )

    outcome = ChaosRunner(config, database_url=database_url()).run()

    report = outcome.report
    assert not outcome.result.violations, report
    ran = [f for f in outcome.faults if f.db_time is not None]
    assert len(ran) == len(outcome.faults) == 10, f"a planned fault did not run\n{report}"
    assert any(f.kind == KILL for f in ran), f"no kill was injected\n{report}"
    assert any(f.kind == STOP and f.held and f.thawed for f in ran), f"no lease holder was frozen and thawed\n{report}"
    assert any(f.kind == PARTITION for f in ran), f"no cluster was cut off from PostgreSQL\n{report}"
    assert any(f.kind == DB_RESTART and f.held for f in ran), f"no restart hit a lease holder\n{report}"
    edges = [f for f in ran if f.kind == EDGE]
    assert all(f.thawed for f in edges), f"an edge fault was never switched off\n{report}"
    edge = outcome.result.figures["edge"]
    assert edge["webhook_modes"] == ["early_answer", "extra_answers", "idle_408", "short_body"], report
    assert edge["h2_modes"] == sorted(H2_MODES), report
    # The modes reached the wire: early 202s answered, and HTTP/2 streams refused or handshakes stalled.
    assert edge["webhook"]["by_status"].get("202", 0) > 0, report
    assert edge["h2_effects"]["refused_streams"] + edge["h2_effects"]["tls_stalled"] > 0, report
    checked = {c.name for c in outcome.result.checks if c.section == "Provider edge"}
    assert "every delivered row holds the answer to its own key" in checked, report
    assert "no device deactivated except by its own row's dead-token answer" in checked, report
    assert edge["answers"]["checked"] > 0, report
    devices = outcome.result.figures["devices"]
    assert devices["deactivated"] == devices["dead_tokens"] > 0, report
    assert devices["expired_rows"] > 0, report
    with capsys.disabled():
        print(report)
