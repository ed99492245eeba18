"""chaos/netns.py: a namespace and its veth pair are made, reachable, and removed - also when the
code inside fails, and when the process that made them died without removing them."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from chaos import netns
from chaos.netns import NetNamespace, unavailable_reason

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"network namespaces unavailable: {unavailable_reason()}"
)


def _links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout


def test_namespace__reaches_this_host_only_through_its_link__removed_even_when_the_body_fails():
    made: list[NetNamespace] = []

    def use_then_fail() -> None:
        with NetNamespace() as ns, socket.socket() as server:
            made.append(ns)
            server.bind((ns.host_ip, 0))
            server.listen()
            port = server.getsockname()[1]
            probe = (
                "import socket,sys\n"
                f"socket.create_connection(('{ns.host_ip}', {port}), timeout=5).close()\n"
                "try:\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                "except OSError:\n"
                "    sys.exit(0)\n"
                "sys.exit(3)\n"
            )
            # Inside: this host's end of the veth answers; this host's 127.0.0.1 is not there.
            assert subprocess.run(ns.command([sys.executable, "-c", probe]), timeout=30).returncode == 0
            assert ns.exists() and ns.host_if in _links()
            raise RuntimeError("the body failed")

    with pytest.raises(RuntimeError, match="the body failed"):
        use_then_fail()
    (ns,) = made
    assert not ns.exists() and ns.host_if not in _links()


def test_sweep_stale__removes_a_namespace_whose_maker_is_dead():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"{netns.PREFIX}{dead.pid}-0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert name in netns.sweep_stale()
        assert name not in netns._namespaces()
        with NetNamespace() as ns:
            assert ns.name not in netns.sweep_stale()
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
