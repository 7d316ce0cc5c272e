"""notifications.backends.http.json_body: the request bodies' bytes are json.dumps' with the same options."""

import json

from notifications.backends.http import json_body

VALUES = [
    {}, [], "", 0, -1.5, float("nan"), float("inf"), True, None, "é ü 漢 \u2028 \x00 \"q\" \\",
    {"message": {"token": "t" * 200, "data": {"i": "1"}, "android": {"ttl": "60s"}}, "z": [1, {"a": None}]},
    {"aps": {"alert": {"title": "T", "body": "B"}}, 3: "int key", "nested": [[[]]]},
]  # fmt: skip


def test_json_body__is_json_dumps_compact_and_unescaped():
    for value in VALUES:
        assert json_body(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
