"""A job's story in time order: what `weave_explain` prints and the admin change pages show."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Model
from django.utils.html import format_html, format_html_join

from weave.display import shown
from weave.sanitize import escape_controls


@dataclass(frozen=True)
class Entry:
    at: datetime | None  # database time; None sorts last ("now")
    what: str  # claim, send, outcome, receipt, holder ...
    text: str


@dataclass
class Timeline:
    title: str
    entries: list[Entry] = field(default_factory=list)
    summary: str = ""

    def add(self, at: datetime | None, what: str, text: str) -> None:
        # One entry is one line, and never shows a secret, whatever a stored reason holds.
        self.entries.append(Entry(at, what, escape_controls(shown(text))))

    def ordered(self) -> list[Entry]:
        # At the same database instant a claim comes before the work it did, and the work before the
        # attempt's ending; otherwise entries keep the order they were added in (the sort is stable).
        return sorted(self.entries, key=lambda e: (e.at is None, e.at or datetime.min, _RANK.get(e.what, 3)))

    def as_text(self) -> str:
        lines = [self.title, ""]
        for entry in self.ordered():
            lines.append(f"{stamp(entry.at):<30} {entry.what:<10} {entry.text}")
        lines += ["", shown(self.summary)]
        return "\n".join(lines)

    def table_html(self) -> str:
        """The entries as an HTML table (what the admin's story shows under the summary)."""
        rows = format_html_join(
            "",
            '<tr class="{}"><td>{}</td><td>{}</td><td>{}</td></tr>',
            (("operator" if e.what in OPERATOR_WORDS else "", stamp(e.at), e.what, e.text) for e in self.ordered()),
        )
        return format_html(
            '<table class="weave-timeline"><thead><tr><th scope="col">database time</th><th scope="col">event</th>'
            '<th scope="col">detail</th></tr></thead><tbody>{}</tbody></table>',
            rows,
        )

    def as_html(self) -> str:
        return format_html("{}<p>{}</p>", self.table_html(), shown(self.summary))


_RANK = {"created": 0, "no end": 1, "claim": 1, "send": 2, "receipt": 2}  # an attempt with no end: before the takeover
# Events a person caused in the admin: highlighted in the change page's timeline.
OPERATOR_WORDS = {
    "started",
    "retried",
    "reopened",
    "cancelled",
    "resumed",
    "edited",
    "send-test",
    "operator",
    "undo",
    "deleted",
}


@dataclass(frozen=True)
class OperatorEvent:
    """One thing a person did to a job in the admin (from its history, LogEntry): when, who, what, why."""

    at: datetime
    who: str
    action: str  # "added", "changed", "deleted"
    text: str


def operator_events(model: type[Model], pk: object) -> list[OperatorEvent]:
    """The admin history of one row, oldest first; empty where django.contrib.admin is not installed."""
    from django.apps import apps

    if not apps.is_installed("django.contrib.admin"):
        return []
    from django.contrib.admin.models import ADDITION, DELETION, LogEntry
    from django.contrib.contenttypes.models import ContentType

    kind = ContentType.objects.get_for_model(model, for_concrete_model=False)
    entries = LogEntry.objects.filter(content_type=kind, object_id=str(pk)).select_related("user")
    names = {ADDITION: "added", DELETION: "deleted"}
    return [
        OperatorEvent(
            at=e.action_time,
            who=e.user.get_username() if e.user_id else "someone",
            action=names.get(e.action_flag, "changed"),
            text=str(e.get_change_message() or "").strip(),
        )
        for e in entries.order_by("action_time", "pk")
    ]


# The first words of the history messages Weave's admin writes, and the timeline event each one is.
_WORDS = (
    ("started", "started"),
    ("re-opened", "reopened"),
    ("retried", "reopened"),
    ("retry", "retried"),
    ("cancelled", "cancelled"),
    ("resumed", "resumed"),
    ("sent test", "send-test"),
    ("sent as a test", "send-test"),
    ("deactivated", "operator"),
    ("changed", "edited"),
    ("added", "created"),
)


def operator_word(event: OperatorEvent) -> str:
    """The timeline's word for an operator event ("reopened", "cancelled", "edited" ...)."""
    lowered = event.text.lower()
    for start, word in _WORDS:
        if lowered.startswith(start):
            return word
    return {"added": "created", "deleted": "deleted"}.get(event.action, "operator")


def add_operator_events(timeline: "Timeline", model: type[Model], pk: object) -> list[OperatorEvent]:
    """Put a row's admin history into its timeline, each event with who did it and what they said."""
    events = operator_events(model, pk)
    for e in events:
        timeline.add(e.at, operator_word(e), f"by {e.who}: {e.text}" if e.text else f"by {e.who}")
    return events


def fences_accounted(current: int, known: dict[int, str]) -> str:
    """One sentence naming what took every fence from 1 to `current`; a fence nothing explains is said to be so."""
    if current <= 0:
        return "No fence taken yet (fence 0)."
    parts = []
    for fence in range(1, current + 1):
        parts.append(f"{fence} {known.get(fence, 'taken by a claim that recorded no attempt (released unstarted)')}")
    return "Fences: " + "; ".join(parts) + "."


def stamp(at: datetime | None) -> str:
    """Database time to the millisecond, with its zone (the database clock speaks UTC here)."""
    if at is None:
        return "now"
    return f"{at.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} {at.tzname() or 'UTC'}"


def clock_time(at: datetime | None) -> str:
    """Database time of day to the millisecond, with its zone: how a reason names a time (`stamp` adds the date)."""
    return "?" if at is None else f"{at.strftime('%H:%M:%S.%f')[:-3]} {at.tzname() or 'UTC'}"


def lateness(sent: datetime | None, due: datetime | None) -> str:
    """Say how a send's database time compares with the due time it was waiting for ("" if none)."""
    if sent is None or due is None:
        return ""
    late = (sent - due).total_seconds()
    if late >= 0:
        return f", {late:.3f} s after its due time {clock_time(due)}"
    return f", {-late:.3f} s before its due time {clock_time(due)} (sent early by a person's retry)"


def holder(job: Any) -> str:
    """Say who holds a leased row now; `job` is annotated by `LeaseQuerySet.with_lease_state()`.

    `Any`: the annotation `lease_live` (and the job's own `status`) are not on the model's static type.
    """
    if job.owner is None:
        return f"nobody holds it (fence {job.fence}); status {job.status}"
    state = "live until" if job.lease_live else "expired at"
    return f"{job.owner} at fence {job.fence}, lease {state} {clock_time(job.lease_expires_at)}"
