"""The two ways a lease operation is refused, kept apart on purpose (DESIGN §2.6)."""


class LeaseError(Exception):
    """Base class for lease refusals."""


class LeaseBusy(LeaseError):
    """A claim found the row held by someone else under a live lease. Nothing was written."""


class LeaseLost(LeaseError):
    """A guarded write or renewal matched no row: the lease is no longer ours. Nothing was written.

    `holder` and `holder_fence` name who holds the row now, when that could be read; `row_gone` says
    the row itself no longer exists (deleted, not taken over), and `names_holder` that the message
    already names the holder, so callers never read the message's text to tell these apart.
    """

    def __init__(
        self,
        message: str,
        *,
        holder: str | None = None,
        holder_fence: int | None = None,
        row_gone: bool = False,
        names_holder: bool = False,
    ):
        super().__init__(message)
        self.holder = holder
        self.holder_fence = holder_fence
        self.row_gone = row_gone
        self.names_holder = names_holder


class LeaseLapsed(LeaseLost):
    """No renewal landed before the lease's expiry (database errors, not a refusal): stop before saving."""


class NotClaimable(LeaseError):
    """A claim found the row free but outside the claimable state the caller asked for (e.g. done)."""


class LeaseFieldsProtected(LeaseError):
    """A `save()` would have written owner, fence or lease_expires_at outside the lease core. Nothing was written."""
