"""The three lease fields every leased row carries, and the save() that never writes them."""

from typing import Any

from django.db import models

from weave.leases.errors import LeaseFieldsProtected
from weave.leases.queryset import LeaseQuerySet

LEASE_FIELDS = frozenset({"owner", "fence", "lease_expires_at"})


class LeasedModel(models.Model):
    """Abstract base: `owner`, `fence` and `lease_expires_at`, guarded by `LeaseQuerySet`.

    Nobody writes these fields except `LeaseQuerySet`. A full-row `save()` of an existing row would
    write back the values read moments before, undoing a claim that landed in between (the fence
    would go back), so `save()` refuses unless `update_fields` leaves the lease fields out.
    """

    # NULL, not "", means free: the claim predicate is "owner IS NULL OR expired".
    owner = models.CharField(max_length=100, null=True, blank=True, editable=False)  # noqa: DJ001
    # Bumped by every claim and never lowered: a stale worker's fence can never match again.
    fence = models.BigIntegerField(default=0, editable=False)
    # Indexed for the sweeps that look for expired leases; claim queries add their own state index.
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False, db_index=True)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, refusing to write the lease fields of a row that may already exist (`LeaseFieldsProtected`)."""
        update_fields = kwargs.get("update_fields")
        # A new row (INSERT only) starts free; anything that may UPDATE must name its fields.
        inserting = self._state.adding and (self.pk is None or kwargs.get("force_insert"))
        if not inserting:
            if update_fields is None:
                raise LeaseFieldsProtected(
                    f"{type(self).__name__}.save() of an existing row would write owner, fence and "
                    "lease_expires_at back: pass update_fields without them (only weave.leases writes them)."
                )
            written = LEASE_FIELDS & set(update_fields)
            if written:
                raise LeaseFieldsProtected(
                    f"{type(self).__name__}.save(update_fields=...) names {', '.join(sorted(written))}: "
                    "only weave.leases writes the lease fields."
                )
        super().save(*args, **kwargs)
