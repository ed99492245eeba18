"""A worker "on another host" for live tests (issue 22): a network namespace joined to this host
by a veth pair (chaos/netns.py), and one fault proxy per service on this host's end of the pair
(chaos/faultproxy.py) - PostgreSQL, the Redis broker and the simulator, which listen on 127.0.0.1
only. The namespace has no other route; cutting a link is blackholing its proxy (silent, both
ways), healing it is lifting that (see chaos/netns.py for why there and not in the kernel)."""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chaos.faultproxy import FaultProxy
from chaos.netns import NetNamespace, unavailable_reason
from sastools.harness import AGENT_QUEUES, Proc, celery_worker

LINKS = ("postgres", "broker", "simulator")


def _hostport(url: str, default_port: int) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def _moved(url: str, host: str, port: int) -> str:
    """`url` with its host:port replaced (credentials, path and query kept)."""
    parts = urllib.parse.urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@{host}:{port}" if auth else f"{host}:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


@dataclass
class RemoteHost:
    ns: NetNamespace
    proxies: dict[str, FaultProxy]
    env: dict[str, str]
    log_dir: Path
    procs: list[Proc] = field(default_factory=list)

    def worker(
        self,
        name: str,
        *,
        queues: str = AGENT_QUEUES,
        concurrency: int = 1,
        pool: str = "prefork",
        **env: str,
    ) -> Proc:
        """A Celery worker inside the namespace, reaching the services only through its links."""
        proc = celery_worker(
            name=name,
            queues=queues,
            log_dir=self.log_dir,
            env={**self.env, **env},
            concurrency=concurrency,
            pool=pool,
        )
        proc.args = self.ns.command(proc.args)
        self.procs.append(proc)
        return proc.start(ready_marker=" ready.", timeout=60)

    def cut(self, *links: str) -> None:
        for link in links:
            self.proxies[link].set(blackhole=True)

    def heal(self, *links: str) -> None:
        for link in links or LINKS:
            self.proxies[link].set()

    def stop(self) -> None:
        self.heal()
        for proc in self.procs:
            proc.kill()  # SIGKILL: a warm shutdown would wait for work the test no longer needs


@contextlib.contextmanager
def remote_host(worker_env: dict[str, str], log_dir: Path) -> Iterator[RemoteHost]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"a worker on another host needs a network namespace: {reason}")
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(NetNamespace())  # removed last, even on failure
        upstreams = {
            "postgres": _hostport(worker_env["DATABASE_URL"], 5432),
            "broker": _hostport(worker_env.get("CELERY_BROKER_URL") or worker_env["REDIS_URL"], 6379),
            "simulator": _hostport(os.environ["SIMULATOR_URL"], 80),
        }
        proxies = {
            link: stack.enter_context(FaultProxy(upstream=address, listen=(ns.host_ip, 0)))
            for link, address in upstreams.items()
        }
        redis_url = _moved(worker_env["REDIS_URL"], ns.host_ip, proxies["broker"].port)
        env = {
            **worker_env,
            "DATABASE_URL": _moved(worker_env["DATABASE_URL"], ns.host_ip, proxies["postgres"].port),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "SIMULATOR_URL": f"http://{ns.host_ip}:{proxies['simulator'].port}",
        }
        host = RemoteHost(ns, proxies, env, log_dir)
        stack.callback(host.stop)
        yield host
