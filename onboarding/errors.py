"""Why a step or a run could not go on. Each class decides what happens to the run."""


class OnboardingError(Exception):
    """Base class for onboarding errors."""


class RunAlreadyActive(OnboardingError):
    """The supplier already has a pending or running onboarding run."""


class AlreadyOnboarded(OnboardingError):
    """The supplier already has a completed run: onboarding it again needs `force=True`."""

    def __init__(self, message: str, *, completed_run_id: int) -> None:
        super().__init__(message)
        self.completed_run_id = completed_run_id


class RunNotRetryable(OnboardingError):
    """Only a failed run whose failure can be fixed may be re-opened; this one may not, and the message says why."""


class StepFailure(OnboardingError):
    """A step could not finish. Subclasses say whether the run fails or waits for a later attempt."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TemporaryFailure(StepFailure):
    """The service was unavailable (429, 5xx, timeout) after the retries: a later attempt tries again.

    `retry_after` is the delay the service last asked for (Retry-After), in seconds, if it asked.
    """

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class PermanentFailure(StepFailure):
    """The service refused the request in a way a retry cannot fix: the run fails.

    `fixable` says whether "Retry failed run" may re-open it once someone fixed the cause (corrected
    the supplier's data, the service's configuration). False for a decision the same run must not
    simply ask again, such as a sanctions hit.
    """

    def __init__(self, reason: str, *, fixable: bool = True) -> None:
        super().__init__(reason)
        self.fixable = fixable


class BusinessRefusal(PermanentFailure):
    """The service answered, and the answer ends onboarding (invalid tax id, sanctions hit)."""
