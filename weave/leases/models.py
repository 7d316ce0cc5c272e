"""The three lease fields every leased row carries."""

from django.db import models

from weave.leases.queryset import LeaseQuerySet


class LeasedModel(models.Model):
    """Abstract base: `owner`, `fence` and `lease_expires_at`, guarded by `LeaseQuerySet`.

    Nobody writes these fields except `LeaseQuerySet`; admins show them read-only.
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
