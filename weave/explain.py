"""A registry of job explainers: `manage.py weave_explain <kind> <id>` looks the kind up here.

Apps register in `AppConfig.ready()`, so the core never imports them:

    register_explainer("notification", explain_notification)
"""

from collections.abc import Callable

from weave.timeline import Timeline

Explainer = Callable[[int], Timeline]
_registry: dict[str, Explainer] = {}


def register_explainer(kind: str, explain: Explainer) -> None:
    """Add (or replace) the explainer for one kind of job; `explain(pk)` returns its timeline."""
    _registry[kind] = explain


def explainers() -> dict[str, Explainer]:
    """Return the registered explainers by kind."""
    return dict(sorted(_registry.items()))
