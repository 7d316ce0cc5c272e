"""Run the chaos audit: real fake servers, K qcluster process groups, seeded faults, every invariant checked."""

from pathlib import Path
from typing import TextIO, cast

from django.core.management.base import BaseCommand, CommandError

from tools.chaos.config import ChaosConfig
from tools.chaos.runner import ChaosOutcome, ChaosRunner


class Command(BaseCommand):
    help = (
        "Drain N notifications and M onboarding runs with K real qcluster processes while clusters are killed, "
        "workers frozen past their lease and the fake services restarted; audit the invariants (exit 1 on any "
        "violation). Empties the job tables of the database: its name must contain 'chaos' or 'test'."
    )

    def add_arguments(self, parser):
        d = ChaosConfig()
        parser.add_argument("-n", "--notifications", type=int, default=d.notifications)
        parser.add_argument("-m", "--runs", type=int, default=d.runs)
        parser.add_argument("-k", "--clusters", type=int, default=d.clusters)
        parser.add_argument("--workers", type=int, default=d.workers, help="django-q2 workers per cluster")
        parser.add_argument("--seed", type=int, default=d.seed)
        parser.add_argument("--kills", type=int, default=d.kills)
        parser.add_argument("--stops", type=int, default=d.stops)
        parser.add_argument("--restarts", type=int, default=d.restarts)
        parser.add_argument(
            "--partitions", type=int, default=d.partitions, help="silent cuts of a cluster's link to PostgreSQL"
        )
        parser.add_argument(
            "--fault-window",
            type=float,
            nargs=2,
            default=d.fault_window,
            metavar=("FROM", "TO"),
            help="faults fire while this share of the jobs is finished (seeded positions)",
        )
        parser.add_argument("--fault-gap", type=float, default=d.fault_gap, help="seconds between faults, at least")
        parser.add_argument("--lease-ttl", type=float, default=d.lease_ttl)
        parser.add_argument("--stop-factor", type=float, default=d.stop_factor, help="a stop lasts this many TTLs")
        parser.add_argument(
            "--partition-factor", type=float, default=d.partition_factor, help="a partition lasts this many TTLs"
        )
        parser.add_argument("--latency-ms", type=int, default=d.latency_ms, help="fake push provider latency")
        parser.add_argument("--supplier-latency-ms", type=int, default=d.supplier_latency_ms)
        parser.add_argument("--deadline", type=float, default=d.deadline, help="seconds after the load starts")
        parser.add_argument("--push-port", type=int, default=d.push_port)
        parser.add_argument("--supplier-port", type=int, default=d.supplier_port)
        parser.add_argument("--log-dir", type=Path, default=d.log_dir, help="children's logs and server state")
        parser.add_argument("--no-progress", action="store_true")
        parser.add_argument(
            "--devices", type=int, default=d.devices,
            help="devices on the FCM, APNs and Web Push fakes (a share with dead tokens); 0 leaves them out",
        )  # fmt: skip
        parser.add_argument("--device-sends", type=int, default=d.device_sends, help="sends to a user's devices")
        parser.add_argument("--push-fakes-port", type=int, default=d.push_fakes_port)
        parser.add_argument(
            "--edge-faults", type=int, default=d.edge_faults,
            help="windows of hostile provider modes (webhook and, with devices, HTTP/2); see docs/chaos-edge.md",
        )  # fmt: skip
        parser.add_argument("--edge-seconds", type=float, default=d.edge_seconds, help="how long each window lasts")
        parser.add_argument(
            "--pg-restarts",
            type=int,
            default=d.pg_restarts,
            help="restarts of PostgreSQL itself (-m fast / -m immediate by turns); the run then starts and uses "
            "its own throwaway PostgreSQL server instead of the configured database",
        )

    def handle(self, *args, **o):
        if o["clusters"] < 3:
            raise CommandError("The chaos run needs at least 3 clusters (-k 3).")
        config = ChaosConfig(
            notifications=o["notifications"],
            runs=o["runs"],
            clusters=o["clusters"],
            workers=o["workers"],
            seed=o["seed"],
            kills=o["kills"],
            stops=o["stops"],
            restarts=o["restarts"],
            partitions=o["partitions"],
            partition_factor=o["partition_factor"],
            fault_window=tuple(o["fault_window"]),
            fault_gap=o["fault_gap"],
            lease_ttl=o["lease_ttl"],
            stop_factor=o["stop_factor"],
            latency_ms=o["latency_ms"],
            supplier_latency_ms=o["supplier_latency_ms"],
            deadline=o["deadline"],
            push_port=o["push_port"],
            supplier_port=o["supplier_port"],
            log_dir=o["log_dir"],
            progress=not o["no_progress"],
            devices=o["devices"],
            device_sends=o["device_sends"],
            push_fakes_port=o["push_fakes_port"],
            edge_faults=o["edge_faults"],
            edge_seconds=o["edge_seconds"],
            pg_restarts=o["pg_restarts"],
        )
        try:
            outcome = self._run(config)
        except KeyboardInterrupt:
            raise CommandError("Interrupted: every process the run started has been stopped.") from None
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(outcome.report)
        if outcome.result.violations:
            raise CommandError(f"{len(outcome.result.violations)} invariant(s) violated; see the report above.")

    def _run(self, config: ChaosConfig) -> ChaosOutcome:
        stdout = cast(TextIO, self.stdout)
        if not config.pg_restarts:
            return ChaosRunner(config, stdout=stdout).run()
        from django.core.management import call_command

        from tools.pgserver import ThrowawayPostgres, default_database_on

        # Restarting PostgreSQL is only ever done to a server the run owns: a throwaway cluster on a free port.
        with ThrowawayPostgres() as server:
            server.create_database("weave_chaos")
            self.stdout.write(f"Own PostgreSQL server for the restarts: {server.url('weave_chaos')}")
            with default_database_on(server, "weave_chaos"):
                call_command("migrate", verbosity=0, interactive=False)
                return ChaosRunner(config, stdout=stdout, database_url=server.url("weave_chaos"), server=server).run()
