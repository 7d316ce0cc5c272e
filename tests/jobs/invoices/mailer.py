"""A fake mail service that sends once per idempotency key, as a real one with keys would."""

import threading


class FakeMailer:
    def __init__(self) -> None:
        self.sent: dict[str, tuple[str, str]] = {}
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def send(self, to: str, subject: str, *, key: str) -> str:
        with self.lock:
            self.calls.append(key)
            self.sent.setdefault(key, (to, subject))
            return f"msg-{len(self.sent)}"


mailer = FakeMailer()
