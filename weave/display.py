"""Text shown to people (admin pages, `weave_explain`), redacted once more on the way out.

Outside text is sanitized before it is stored (`weave.sanitize.outside_text`). This is the second
line: whatever a table holds, a page or a printed timeline never shows the push token, a credential
header, or a password from a configured URL, to any user, view-only ones included.
"""

from urllib.parse import urlsplit

from weave.conf import weave_settings
from weave.sanitize import decode, redact


def known_secrets() -> list[str]:
    """The configured secrets: the push token and any userinfo in the configured service URLs."""
    found = [str(weave_settings.PUSH_TOKEN or "")]
    for url in (weave_settings.PUSH_URL, weave_settings.SUPPLIER_API_URL):
        try:
            parts = urlsplit(str(url or ""))
        except ValueError:
            continue
        found += [parts.password or "", parts.username or ""]
    return [secret for secret in found if secret]


def shown(text: str) -> str:
    """Return `text` fit to show a person: decoded, NUL-free, secrets and credentials redacted."""
    return redact(decode(text).replace("\x00", "\ufffd"), known_secrets())
