"""The public API for what an app shows its operators: admin pages, console panels, timelines, retention.

The core draws the dashboard, serves the metrics and runs `weave_explain`; an app builds its own
pages from these pieces, and registers its panel, health findings and purges in `AppConfig.ready()`:

- admin: `OperatorModelAdmin` (the console's look, history by the database clock, `report_outcomes` for
  an action), `LeasedModelAdmin` on it (lease state by the database clock, the timeline on the change
  page), `ReadOnlyAdminMixin` and `ReadOnlyTabularInline` (its table in a region a keyboard can scroll),
  `ActionsWhereTheyApply` with `ActionRule`, `permission_check` (an action's own permission),
  `OperatorLogMixin` and `record_operator_action` (actions written to
  `LogEntry`), the list filters `LeaseStateFilter`, `state_filter`, `within_filter` and `choice_filter`,
  the columns `link_column` and `clipped_column`, and `JobAdminMixin` for a `weave.jobs` job type (a
  `LeasedModelAdmin` with the job's columns and actions);
- display: times with seconds and zone (`timestamp`, `timestamp_column`), links between rows (`linked`,
  `counted`, `admin_link`, `admin_link_to`, `change_link`, `change_url`, `linked_ids`, `changelist_link`,
  `changelist_url`), states and reasons (`state_word`, `state_column`, `reason_column`, `joined_reason`,
  `said_once`), counts in words (`how_many`, `plural`), JSON as a table (`key_values`), and text redacted
  on the way out (`shown`, `clipped`);
- console: charts drawn on the server (`bar_chart`, `line_chart`, `table`, `stats`, `age`, `when`),
  health findings for the dashboard's verdict (`register_health`, `Finding` with `Finding.said`,
  `FAILING`, `DEGRADED`), bounded counts and samples (`planner_counts`, `counts_by`, `count_tiles`,
  `minute_buckets`, `percentiles_by`, `db_now`, `RunningCounts` with `counted_between`, `seconds_since`)
  and the worker processes' reports (`workers`);
- timelines: one job's story (`Timeline`, `OperatorEvent`, `add_operator_events`, `clock_time`,
  `fences_accounted`, `holder`, `lateness`) and `explain_job` for a `weave.jobs` job type;
- retention: `PurgeSpec` and `register_purge`, and `purged_totals` for a panel.
"""

from weave.admin import (
    ActionRule,
    ActionsWhereTheyApply,
    ConsoleMedia,
    LeasedModelAdmin,
    LeaseStateFilter,
    OperatorLogMixin,
    OperatorModelAdmin,
    ReadOnlyAdminMixin,
    ReadOnlyTabularInline,
    choice_filter,
    clipped_column,
    link_column,
    permission_check,
    record_operator_action,
    state_filter,
    within_filter,
)
from weave.charts import age, bar_chart, line_chart, stats, table, when
from weave.display import (
    admin_link,
    admin_link_to,
    change_link,
    change_url,
    changelist_link,
    changelist_url,
    clipped,
    counted,
    joined_reason,
    key_values,
    linked,
    linked_ids,
    reason_column,
    said_once,
    shown,
    state_column,
    state_word,
    timestamp,
    timestamp_column,
)
from weave.jobs.admin import JobAdminMixin
from weave.jobs.explain import explain_job
from weave.metrics import RunningCounts, counted_between, seconds_since
from weave.retention import PurgeSpec, purged_totals, register_purge
from weave.telemetry import (
    DEGRADED,
    FAILING,
    Finding,
    count_tiles,
    counts_by,
    db_now,
    minute_buckets,
    percentiles_by,
    planner_counts,
    register_health,
    workers,
)
from weave.timeline import (
    OperatorEvent,
    Timeline,
    add_operator_events,
    clock_time,
    fences_accounted,
    holder,
    lateness,
)
from weave.wording import how_many, plural

__all__ = [
    "DEGRADED",
    "FAILING",
    "ActionRule",
    "ActionsWhereTheyApply",
    "ConsoleMedia",
    "Finding",
    "JobAdminMixin",
    "LeaseStateFilter",
    "LeasedModelAdmin",
    "OperatorEvent",
    "OperatorLogMixin",
    "OperatorModelAdmin",
    "PurgeSpec",
    "ReadOnlyAdminMixin",
    "ReadOnlyTabularInline",
    "RunningCounts",
    "Timeline",
    "add_operator_events",
    "admin_link",
    "admin_link_to",
    "age",
    "bar_chart",
    "change_link",
    "choice_filter",
    "change_url",
    "changelist_link",
    "changelist_url",
    "clipped",
    "clipped_column",
    "clock_time",
    "count_tiles",
    "counted",
    "how_many",
    "counted_between",
    "counts_by",
    "db_now",
    "explain_job",
    "fences_accounted",
    "holder",
    "joined_reason",
    "key_values",
    "lateness",
    "line_chart",
    "linked",
    "linked_ids",
    "plural",
    "link_column",
    "minute_buckets",
    "percentiles_by",
    "permission_check",
    "planner_counts",
    "purged_totals",
    "reason_column",
    "record_operator_action",
    "register_health",
    "register_purge",
    "said_once",
    "seconds_since",
    "shown",
    "state_column",
    "state_filter",
    "state_word",
    "stats",
    "table",
    "timestamp",
    "timestamp_column",
    "when",
    "within_filter",
    "workers",
]
