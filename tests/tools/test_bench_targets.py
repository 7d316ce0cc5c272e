"""The protocol bench's judgement of each target: the ratio, and which ceiling a miss runs into (no timings)."""

from bench.protocols import ceiling, medians, target_lines


def row(system: str, rate: float, worker: float = 0.0, postgres: float = 0.0, fake: float = 0.0) -> dict:
    return {"system": system, "latency_ms": 0, "rate": rate, "worker_cpu_per_1000": worker,
            "postgres_cpu_per_1000": postgres, "fake_cpu_per_1000": fake}  # fmt: skip


ANCHOR = row("firebase-admin send_each_async", 500.0)


def test_the_ceilings_are_the_fastest_rates_the_cpu_per_push_allows():
    weave = row("weave fcm", 900.0, worker=0.5, postgres=0.1, fake=0.4)
    assert ceiling(weave, 2) == 2000.0  # 1.0 s of CPU per 1,000 pushes on two cores
    assert ceiling(weave, 2, worker=False) == 2500.0  # what the fake and PostgreSQL leave: the fake's one core


def test_one_process_runs_on_one_core_at_most__the_fakes_and_a_drain_in_process():
    heavy_fake = row("weave fcm", 900.0, worker=0.1, fake=0.8)
    assert ceiling(heavy_fake, 2, worker=False) == 1250.0  # not 2,500: the fakes share one GIL
    in_process = row("weave fcm", 900.0, worker=0.9, fake=0.1)
    cluster = {**row("weave fcm, qcluster", 900.0, worker=0.9, fake=0.1), "worker_processes": 2}
    assert round(ceiling(in_process, 2)) == 1111  # one drain's process: one core
    assert ceiling(cluster, 2) == 2000.0  # two workers: the two cores, shared with the fake


def test_a_met_target():
    (line,) = target_lines([row("weave fcm", 1000.0, worker=0.5, fake=0.4), ANCHOR], 2)
    assert line.endswith(" met") and "2.00 (target 2: 1,000/s" in line


def test_a_miss_above_what_the_fake_and_postgresql_leave():
    (line,) = target_lines([row("weave fcm", 600.0, worker=0.2, postgres=0.2, fake=1.6), ANCHOR], 2)
    assert "1.20" in line and "leave 625/s" in line and "out of any system's reach" in line


def test_a_miss_above_the_worker_s_ceiling():
    (line,) = target_lines([row("weave fcm", 800.0, worker=1.2, postgres=0.1, fake=0.9), ANCHOR], 2)
    assert "leave 1,111/s, with the worker 833/s" in line and "only less CPU per push" in line


def test_a_miss_with_room_says_how_much_of_the_ceiling_was_reached():
    (line,) = target_lines([row("weave fcm", 800.0, worker=0.3, postgres=0.1, fake=0.6), ANCHOR], 2)
    assert "missed with room: 48% of the worker's ceiling reached, 60% asked" in line


def test_the_qcluster_row_is_judged_on_its_own_and_a_target_without_both_rows_is_left_out():
    rows = [row("weave fcm", 1200.0, worker=0.5), row("weave fcm, qcluster", 700.0, worker=0.5), ANCHOR]
    lines = target_lines(rows, 2)
    assert len(lines) == 2  # FCM against firebase-admin, in process and through qcluster; no fcm-django row here
    assert lines[0].startswith("  0 ms  weave fcm / ") and lines[0].endswith(" met")
    assert lines[1].startswith("  0 ms  weave fcm, qcluster / ") and "1.40" in lines[1]


def test_rounds_are_judged_on_each_row_s_medians_and_the_worst_delivery_shows():
    rounds = [
        {**row("weave fcm", rate, worker=cpu), "delivered": delivered, "n": 3000, "round": number}
        for number, (rate, cpu, delivered) in enumerate([(900.0, 0.5, 3000), (1200.0, 0.4, 2999), (1000.0, 0.7, 3000)])
    ]
    anchor_rates = enumerate([450.0, 520.0, 400.0])
    rounds += [{**ANCHOR, "delivered": 3000, "n": 3000, "round": n, "rate": r} for n, r in anchor_rates]

    weave, anchor = medians(rounds)

    assert (weave["rate"], weave["worker_cpu_per_1000"], weave["delivered"], weave["rounds"]) == (1000.0, 0.5, 2999, 3)
    assert anchor["rate"] == 450.0
    (line,) = target_lines([weave, anchor], 2)
    assert "2.22" in line and line.endswith(" met")
