"""weave.sanitize: outside text is decoded, redacted, kept on one line and bounded before it is stored or logged."""

import pytest

from weave.sanitize import REDACTED, decode, escape_controls, outside_text, redact, safe_url, truncate

TOKEN = "s3cr3t-t0ken.value_42"


@pytest.mark.parametrize(
    "text",
    [
        f"Bearer {TOKEN}",  # bare, as an exception message or an echoing gateway prints it
        f"bearer {TOKEN}",
        f"upstream said: Bearer {TOKEN}, go away",
        f"Authorization: Bearer {TOKEN}",
        f"authorization={TOKEN}",
        f"Authorization: Token {TOKEN}",
        f"Authorization: key={TOKEN}",  # FCM's legacy server key header
        f"Basic {TOKEN}",
        f'{{"headers": {{"Authorization": "Bearer {TOKEN}"}}}}',
    ],
)
def test_redact__credentials_are_removed_whatever_their_value(text):
    redacted = redact(text)
    assert TOKEN not in redacted
    assert REDACTED in redacted


def test_redact__a_bare_bearer_token_keeps_the_scheme_and_the_text_around_it():
    assert redact(f"Bearer {TOKEN}") == f"Bearer {REDACTED}"
    assert redact(f"refused Bearer {TOKEN}; retry") == f"refused Bearer {REDACTED}; retry"


def test_redact__known_secrets_are_replaced_anywhere_but_tiny_ones_are_not():
    assert redact(f"x{TOKEN}y", secrets=[TOKEN]) == f"x{REDACTED}y"
    # A one-to-three character "secret" would shred ordinary text; it is never worth redacting.
    assert redact("abc abc", secrets=["abc", ""]) == "abc abc"


def test_redact__ordinary_text_that_mentions_a_key_is_left_alone():
    text = "sent key 1b4e28ba-2fa1-11d2-883f-0016d3cca427 to the provider"
    assert redact(text) == text


def test_redact__url_userinfo_is_removed():
    assert redact("POST https://admin:hunter22@push.example/v1 failed") == (
        f"POST https://{REDACTED}@push.example/v1 failed"
    )


def test_safe_url__drops_userinfo_and_keeps_the_rest():
    assert safe_url("https://admin:hunter22@push.example:8443/a?b=1#c") == (
        f"https://{REDACTED}@push.example:8443/a?b=1#c"
    )
    assert safe_url("https://push.example/a") == "https://push.example/a"


def test_decode__invalid_utf8_and_lone_surrogates_become_replacement_characters():
    assert decode(b"ok \xff\xfe") == "ok \ufffd\ufffd"
    assert decode("lone \ud800") == "lone \ufffd"


def test_escape_controls__one_event_stays_one_line():
    forged = "bad\x00token\r\nevent=completed\x1b[31m\u2028\x85"
    escaped = escape_controls(forged)
    assert escaped == "bad\\x00token\\x0d\\x0aevent=completed\\x1b[31m\\u2028\\x85"
    assert escaped.isprintable()


def test_truncate__marks_the_cut_and_never_exceeds_the_limit():
    assert truncate("abc", 3) == "abc"
    assert truncate("abcdef", 4) == "abc…"
    assert len(truncate("x" * 10_000)) == 300


def test_outside_text__decodes_redacts_escapes_and_bounds_in_one_call():
    raw = b"\xff Authorization: Bearer " + TOKEN.encode() + b"\n" + b"x" * 1000
    text = outside_text(raw, limit=80)
    assert TOKEN not in text
    assert text.startswith("\ufffd Authorization: Bearer [redacted]\\x0a")
    assert len(text) == 80 and text.endswith("…")
    assert "\n" not in text and "\x00" not in outside_text(b"a\x00b")


def _reference(raw, secrets, limit):
    # What outside_text() is defined as: every step, in order, whatever the text.
    return truncate(escape_controls(redact(decode(raw), secrets)), limit)


_PIECES = [
    "a", "Z", " ", "/", ":", "=", "@", ";", ",", "\"", "bearer ", "BeArEr ", "basic ", "Basic\t", "authorization",
    "AUTHORIZATION: ", "key=", "token ", "http://", "u:p@", "://", "\x00", "\n", "\x7f", "\x85", "é", "\u2028",
    "\ud800", "s3cr", "3t", "projects/p/messages/0:17%ab", "…",
]  # fmt: skip


def test_outside_text__its_shortcut_for_plain_ascii_gives_the_full_passes_answer():
    import random

    rng = random.Random(20261202)
    secret = "s3cr3t"
    cases = [("projects/x/messages/1", [secret]), ("", []), (b"plain bytes", [secret]), (b"caf\xc3\xa9 \xff", [])]
    for _ in range(5000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randrange(0, 12)))
        cases.append((text, [secret, "bear"] if rng.random() < 0.5 else []))
        if text.isascii() and rng.random() < 0.3:
            cases.append((text.encode("ascii"), [secret]))
    for raw, secrets in cases:
        for limit in (8, 300):
            assert outside_text(raw, secrets=secrets, limit=limit) == _reference(raw, secrets, limit), (raw, secrets)
            # Secrets given once (a generator) are still all applied, whichever way the text goes.
            assert outside_text(raw, secrets=iter(secrets), limit=limit) == _reference(raw, secrets, limit)


@pytest.mark.parametrize(
    "url",
    [
        "https://ghp_0123456789abcdef@push.example/v1",  # a token as the user name, no password
        "https://admin:@push.example/v1",  # an empty password
        "https://admin:hunter22@push.example/v1",
    ],
)
def test_outside_text__url_userinfo_is_redacted_with_or_without_a_password(url):
    text = outside_text(f"POST {url} failed")
    assert text == f"POST https://{REDACTED}@push.example/v1 failed"


def test_outside_text__an_at_sign_after_the_host_is_not_userinfo():
    assert outside_text("GET https://push.example/users/@me failed") == "GET https://push.example/users/@me failed"
