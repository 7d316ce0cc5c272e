"""A fake carrier and payment service: charges once per idempotency key, like a real provider would."""

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# A parcel "hang:<path>" makes its first booking write this process's id to <path> and then hang, so that a
# test can kill the worker process mid-step (the path exists by the next attempt, which books at once).
HANG = "hang:"
# A parcel "poison:<path>" kills the worker process booking it, every time, after adding its id to <path>.
POISON = "poison:"


@dataclass
class FakeCarrier:
    charges: dict[str, int] = field(default_factory=dict)  # idempotency key -> cents
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def quote(self, parcel: str) -> int:
        return 500 + 10 * len(parcel)

    def book_and_charge(self, *, key: str, parcel: str, cents: int) -> str:
        """Book and charge; the same key again returns the first booking and charges nothing more."""
        if parcel.startswith(HANG) and not (marker := Path(parcel[len(HANG) :])).exists():
            marker.write_text(f"{os.getpid()}\n")
            time.sleep(120)
        if parcel.startswith(POISON):
            with Path(parcel[len(POISON) :]).open("a") as pids:
                pids.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        with self.lock:
            self.calls.append(key)
            self.charges.setdefault(key, cents)
            return f"CR-{abs(hash(key)) % 10**8:08d}"

    def reset(self) -> None:
        with self.lock:
            self.charges.clear()
            self.calls.clear()


carrier = FakeCarrier()
# A test sets this to act while a step is in flight (e.g. steal the lease), then clears it.
during_booking: list = []
