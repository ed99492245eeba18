"""A network namespace joined to this host by one veth pair, to run a process as if on another host
(issue 22, "a worker on another host, cut off"). Root and `ip netns` only; standard library.

    with NetNamespace() as ns:                 # made here, removed on exit (even on failure)
        ns.host_ip, ns.ns_ip                   # 10.213.N.1 (this host's end), 10.213.N.2 (inside)
        ns.command([...])                      # argv prefixed with `ip netns exec <name>`

The namespace has its own loopback and one link, a /30 to this host's end of the pair: no
default route, so it reaches exactly what listens on `host_ip`. Our services listen on
127.0.0.1 only, which a namespace cannot reach; tests put a `chaos.faultproxy.FaultProxy` for
each service on `host_ip` (one port per service). That proxy is the namespace's link to the
service: blackholing it cuts that link silently in both directions (no RST, no ICMP; bytes wait
and flow again when it heals, as TCP's retransmissions would deliver them), one service at a
time. Chosen over a cut in the kernel because this kernel has neither iptables/nftables nor the
tc qdiscs to drop by port, and because `ip link set down` cuts every service at once and turns
into fast errors (no route / ARP failure: EHOSTUNREACH), not the silence of a partition.

Names carry the creating process's pid (`sas-<pid>-<n>`); namespaces left by a dead process
(a test run killed with -9) are removed by the next `NetNamespace()` (`sweep_stale`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from itertools import count

from devservices.common import pid_alive

PREFIX = "sas-"
SUBNET = ipaddress.IPv4Network("10.213.0.0/16")
_counter = count()


class NetnsUnavailable(RuntimeError):
    """Not root, or no `ip netns`: the caller should skip, saying so."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = _ip("netns", "list", check=False)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_inside(name: str) -> None:
    """SIGKILL what still runs in the namespace (only our own processes run in ours)."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _remove(name: str, host_if: str | None = None) -> None:
    _kill_inside(name)
    _ip("netns", "del", name, check=False)  # takes its end of the veth, and with it the pair
    if host_if:
        _ip("link", "del", host_if, check=False)


def sweep_stale() -> list[str]:
    """Remove namespaces (and their veths) that a process no longer running made."""
    removed = []
    for name in _namespaces():
        found = re.fullmatch(rf"{PREFIX}(\d+)-(\d+)", name)
        if found and not pid_alive(int(found.group(1))):
            _remove(name, _host_if(int(found.group(1)), int(found.group(2))))
            removed.append(name)
    return removed


def _host_if(pid: int, n: int) -> str:
    return f"sv{pid % 10**7}x{n % 100}"[:15]


def _used_addresses() -> set[ipaddress.IPv4Address]:
    out = _ip("-o", "-4", "addr", "show", check=False).stdout
    return {ipaddress.IPv4Interface(m).ip for m in re.findall(r"inet (\S+)", out)}


def _free_subnet(start: int) -> ipaddress.IPv4Network:
    """A /30 of SUBNET with no address in use, searched from the `start`-th: sessions start at
    different places (their pid), so two making a namespace at the same instant do not both take
    the first free one."""
    used = _used_addresses()
    nets = list(SUBNET.subnets(new_prefix=30))
    for i in range(len(nets)):
        net = nets[(start + i) % len(nets)]
        if not any(addr in net for addr in used):
            return net
    raise RuntimeError(f"no free /30 left in {SUBNET}")


class NetNamespace:
    def __init__(self) -> None:
        reason = unavailable_reason()
        if reason:
            raise NetnsUnavailable(reason)
        n = self.n = next(_counter)
        pid = os.getpid()
        self.name = f"{PREFIX}{pid}-{n}"
        self.host_if = _host_if(pid, n)
        self.ns_if = f"{self.host_if}n"[:15]
        self.host_ip = ""
        self.ns_ip = ""
        self.made = False

    def create(self) -> NetNamespace:
        sweep_stale()
        try:
            net = _free_subnet(os.getpid() * 64 + self.n)
            hosts = list(net.hosts())
            self.host_ip, self.ns_ip = str(hosts[0]), str(hosts[1])
            _ip("netns", "add", self.name)
            self.made = True
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            _ip("-n", self.name, "link", "set", self.ns_if, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
            self._wait_usable()
        except BaseException:
            self.remove()
            raise
        return self

    def _wait_usable(self) -> None:
        """A fresh IPv4 address is usable at once (no duplicate address detection as in IPv6);
        this only waits for both ends to report the link up."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            inside = _ip("-n", self.name, "-o", "link", "show", self.ns_if, check=False).stdout
            if "LOWER_UP" in inside:
                return
            time.sleep(0.05)
        raise RuntimeError(f"the veth pair of {self.name} did not come up")

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespace (ip netns exec replaces itself with it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def remove(self) -> None:
        if self.made:
            _remove(self.name, self.host_if)
            self.made = False
        else:
            _ip("link", "del", self.host_if, check=False)

    def exists(self) -> bool:
        return self.name in _namespaces()

    def __enter__(self) -> NetNamespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.remove()
