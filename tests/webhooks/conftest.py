from __future__ import annotations

from collections.abc import Iterator

import pytest

from .receiver import Receiver, start_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = start_receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()
