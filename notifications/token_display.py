"""How a device token is shown to people: never whole, the same way on every screen and in `weave_explain`."""

PLATFORM_NAMES = {"android": "Android", "ios": "iOS", "web": "Web", "other": "other"}


def mask_token(token: str, platform: str = "") -> str:
    """A device token as a person may see it: never whole (it is the address of someone's phone).

    A Web Push subscription shows its push service's host and the end of its endpoint; app tokens
    (FCM, APNs, a webhook's) their first 6 and last 4 characters.
    """
    token = token or ""
    if token.lstrip().startswith("{"):
        import json
        from urllib.parse import urlsplit

        try:
            endpoint = str(json.loads(token).get("endpoint", ""))
            parts = urlsplit(endpoint)
        except (ValueError, AttributeError):
            return "Web Push subscription (unreadable)"
        tail = parts.path.rstrip("/")[-6:]
        return f"Web Push · {parts.hostname or '?'} …{tail}"
    name = PLATFORM_NAMES.get(platform, "")
    short = token if len(token) <= 12 else f"{token[:6]}…{token[-4:]}"
    return f"{name} · {short}" if name else short
