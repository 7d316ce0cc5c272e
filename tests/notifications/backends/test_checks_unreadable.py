"""The system check names a key file this process cannot read, whoever runs the tests (CI runs as root).

Root reads a mode-0 file, so the kernel never says "unreadable" to it. The check asks the kernel through
`os.access`; for root this test answers in the kernel's place for that one file, as it would answer any
other user, so the refusal is shown in every run instead of being skipped in CI.
"""

import os

from notifications.checks import check_provider_url

APNS = "notifications.backends.apns.APNsBackend"


def test_check__names_a_key_file_this_process_cannot_read(settings, apns_options, tmp_path, monkeypatch):
    locked = tmp_path / "locked.p8"
    locked.write_text("secret")
    os.chmod(locked, 0)
    if os.geteuid() == 0:
        real_access = os.access

        def access_as_another_user(path, mode, *args, **kwargs):
            if os.fspath(path) == str(locked):
                return False  # what the kernel answers a non-root process for a mode-0 file
            return real_access(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access_as_another_user)
    settings.WEAVE = {
        "PUSH_URL": "https://push.example/send",
        "PUSH_BACKENDS": {
            "locked": {"BACKEND": APNS, "OPTIONS": {**apns_options, "key_file": str(locked)}},
            "fine": {"BACKEND": APNS, "OPTIONS": apns_options},
        },
    }

    messages = [error.msg for error in check_provider_url()]

    assert len(messages) == 1, messages
    assert "'locked'" in messages[0] and "locked.p8' is not readable by this process" in messages[0]
