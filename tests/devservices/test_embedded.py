"""The embedded servers of `make run` / `make test` (devservices/) really work.

An embedded PostgreSQL and Redis are started in a temporary data folder on free ports, answer a
query and a PING, and are stopped. The machine's servers (5432/6379) and the work tree's
`.devdata/` are never used.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from devservices.common import pid_alive, port_open
from devservices.postgres import EMBEDDED_PG_PORT, MACHINE_PG_PORT, EmbeddedPostgres, ensure_database
from devservices.redis import EMBEDDED_REDIS_PORT, MACHINE_REDIS_PORT, EmbeddedRedis

SHARED_PORTS = {MACHINE_PG_PORT, MACHINE_REDIS_PORT, EMBEDDED_PG_PORT, EMBEDDED_REDIS_PORT}

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def devdata() -> Iterator[Path]:
    # Not pytest's tmp_path: as root the server runs as `nobody`, which must be able to reach
    # the folder, and /tmp/pytest-of-root is 0700. tempfile's folder is 0700 too, but under a
    # world-traversable parent; devservices opens it to the server's user itself.
    path = Path(tempfile.mkdtemp(prefix="sas-devservices-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def test_embedded_postgres_starts_answers_and_stops(devdata: Path) -> None:
    server = EmbeddedPostgres(devdata=devdata, port=0)
    fallback = server.fallback_root()
    fallback_existed = fallback.exists()
    assert server.state_file.is_relative_to(devdata)
    try:
        url = server.ensure()
        port = port_of(url)
        assert port not in SHARED_PORTS
        state = server.running()
        assert state is not None and state.port == port
        assert Path(state.data_dir).is_relative_to(devdata) or Path(state.data_dir).is_relative_to(fallback)

        ensure_database(url)  # creates `sasproject` on the embedded server
        with psycopg.connect(url, connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            version = conn.execute("SHOW server_version_num").fetchone()
            assert version is not None and int(version[0]) >= 180000

        assert server.ensure() == url  # a second call reuses the running server
    finally:
        server.stop()
        if not fallback_existed:
            shutil.rmtree(fallback, ignore_errors=True)
    assert not pid_alive(state.pid)
    assert not port_open(port)
    assert not server.state_file.exists()


def test_embedded_redis_starts_answers_and_stops(devdata: Path) -> None:
    server = EmbeddedRedis(devdata=devdata, port=0)
    assert server.state_file.is_relative_to(devdata)
    try:
        url = server.ensure()
        port = port_of(url)
        assert port not in SHARED_PORTS
        state = server.running()
        assert state is not None and state.port == port

        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            assert client.ping() is True
            assert client.info("server")["redis_version"]
        finally:
            client.close()

        assert server.ensure() == url
    finally:
        server.stop()
    assert not pid_alive(state.pid)
    assert not port_open(port)
    assert not server.state_file.exists()
