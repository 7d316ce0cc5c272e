"""The public API for the edge, where outside text and outside services meet a job (DESIGN §5).

- Outside text (provider and service answers, exception messages) is stored, logged and shown only
  through `outside_text` (decoded, NUL-free, controls escaped, credentials redacted, bounded);
  `safe_url` drops a URL's credentials, `decode` and `escape_controls` are its first two steps.
- An HTTP answer is classified once (`http_class`, `HttpClass`), and a `Retry-After` read once
  (`parse_retry_after`), the same way for every app.
- A synchronous client caps the whole exchange with one deadline (`deadline_transport` with
  `whole_request_deadline`) and reads at most `BODY_CAP` bytes of a body.
- What a caller hands to a public service is checked before anything is stored (`check_text`,
  `check_json`, `check_ids`); `json_bytes` is the compact UTF-8 JSON whose size the checks measure,
  and `parse_json_object` reads a request body as one JSON object or says clearly why not.
"""

from weave.http import BODY_CAP, deadline_transport, whole_request_deadline
from weave.retry import HttpClass, http_class, is_json_content_type, parse_retry_after
from weave.sanitize import SNIPPET, decode, escape_controls, outside_text, redact, safe_url
from weave.validation import check_ids, check_json, check_text, json_bytes, parse_json_object

__all__ = [
    "BODY_CAP",
    "SNIPPET",
    "HttpClass",
    "check_ids",
    "check_json",
    "check_text",
    "deadline_transport",
    "decode",
    "escape_controls",
    "http_class",
    "is_json_content_type",
    "json_bytes",
    "outside_text",
    "parse_json_object",
    "parse_retry_after",
    "redact",
    "safe_url",
    "whole_request_deadline",
]
