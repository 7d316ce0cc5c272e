"""A process whose clock is off by a number of seconds: libfaketime, plus the one repair it needs for Python.

    env = skewed_env(-5)       # {"LD_PRELOAD": "...libfaketime.so.1:.../clockwait_shim.so", "FAKETIME": "-5"}
    missing()                  # None when it can be done here, else why not

Monotonic time is faked too (libfaketime's default), as Python's `sleep()` needs the two clocks to agree.
libfaketime 0.9.10 (Debian's) does not intercept `sem_clockwait()`, through which CPython 3.11 waits on a
lock with a timeout: under libfaketime alone such a wait never times out, so a worker whose loop waits
with a timeout (a condition, a queue, a thread pool) stops. `tools/clockwait_shim.c` moves those deadlines
from the faked clock to the real one; it is compiled here on first use (a C compiler is needed) into a
cache directory, never committed.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

LIBS = (
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
)
SHIM_SOURCE = Path(__file__).with_name("clockwait_shim.c")


def faketime_lib() -> Path | None:
    return next((p for p in LIBS if p.exists()), None)


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def missing() -> str | None:
    """None when a skewed process can be started here, else what is missing and how to get it."""
    if faketime_lib() is None:
        return "libfaketime is missing (apt-get install faketime libfaketime)"
    if compiler() is None:
        return "a C compiler is missing for the libfaketime repair shim (apt-get install gcc libc6-dev)"
    return None


def shim() -> Path:
    """The compiled repair shim, built once per source version into a cache directory."""
    source = SHIM_SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / f"weave-clockwait-{digest}-{os.geteuid()}.so"
    if target.exists():
        return target
    cc = compiler()
    if cc is None:
        raise RuntimeError(missing() or "no C compiler")
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SHIM_SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"compiling {SHIM_SOURCE.name} failed: {done.stderr.strip()}")
    partial.replace(target)  # atomic: a concurrent build never leaves a half-written library behind
    return target


def skewed_env(offset: float) -> dict[str, str]:
    """Environment for a child whose wall and monotonic clocks run `offset` seconds off this machine's."""
    lib = faketime_lib()
    if lib is None:
        raise RuntimeError(missing() or "no libfaketime")
    return {
        "LD_PRELOAD": f"{lib}:{shim()}",
        "FAKETIME": f"{offset:+g}",
    }
