"""Several simulated hosts on this machine: network namespaces on a private bridge, each with its own clock.

    with SimulatedHosts(3) as hosts:
        hosts.gateway                    # the bridge's address on this machine (10.231.N.1)
        hosts.address(0)                 # host 0's own address inside its namespace
        hosts.command(1, [...], clock_offset=300)   # run a command on host 1, its clock 5 minutes ahead

Everything stays on this machine: a bridge with a private /24 no other interface uses, one veth pair
per host (one end in the host's namespace, the other on the bridge), no route anywhere else. A host's
clock is shifted with libfaketime (`FAKETIME="+300"`), monotonic time included, as a skewed machine's
would be, with the repair shim of `tools.skewed_clock`. Needs root, `ip`, libfaketime and a C compiler;
`available()` says whether they are there. Everything is removed on exit.
"""

import os
import random
import shutil
import subprocess
from collections.abc import Sequence

from tools import skewed_clock


def available() -> str | None:
    """None when namespaces and libfaketime can be used here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing"
    if why_not := skewed_clock.missing():
        return why_not
    probe = f"wvprobe{os.getpid() % 100000}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True)  # noqa: S607
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.decode(errors='replace').strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)  # noqa: S607
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)  # noqa: S607
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def _free_subnet() -> str:
    """A 10.231.N prefix that no interface on this machine has an address in."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout  # noqa: S607
    for _ in range(100):
        prefix = f"10.231.{random.randint(1, 254)}"  # noqa: S311 (not a secret)
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.231.N.0/24 subnet")


class SimulatedHosts:
    def __init__(self, count: int) -> None:
        self.count = count
        self.tag = f"{os.getpid() % 10000:04d}"
        self.prefix = _free_subnet()
        self.bridge = f"wv{self.tag}br"
        self.namespaces = [f"wv{self.tag}-host{i}" for i in range(count)]
        self._made: list[tuple[str, str]] = []  # what to delete: ("netns"|"link", name)

    @property
    def gateway(self) -> str:
        return f"{self.prefix}.1"

    def address(self, index: int) -> str:
        return f"{self.prefix}.{11 + index}"

    def __enter__(self) -> "SimulatedHosts":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            self._made.append(("netns", ns))
            outside, inside = f"wv{self.tag}h{i}", f"wv{self.tag}n{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made.append(("link", outside))  # deleting one end deletes the pair
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def command(self, index: int, args: Sequence[str], *, clock_offset: int = 0) -> list[str]:
        """`args` run inside host `index`'s namespace, its clock `clock_offset` seconds off (libfaketime)."""
        prefix = ["ip", "netns", "exec", self.namespaces[index]]
        if clock_offset:
            # Monotonic time is faked too (libfaketime's default): Python's sleep() needs the two to agree.
            env = skewed_clock.skewed_env(clock_offset)
            prefix += ["env", *(f"{key}={value}" for key, value in env.items()), "FAKETIME_NO_CACHE=1"]
        return [*prefix, *args]

    def close(self) -> None:
        for kind, name in reversed(self._made):
            if kind == "netns":
                subprocess.run(["ip", "netns", "del", name], capture_output=True)  # noqa: S607
            else:
                subprocess.run(["ip", "link", "del", name], capture_output=True)  # noqa: S607
        self._made = []
