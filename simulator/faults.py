"""Runtime fault injection for the simulated services.

Each service (inventory, payment, shipping) has its own `ServiceFaults` and its own
`random.Random`, so a run can be replayed exactly by sending the same ``seed`` and the same
sequence of requests. Faults live in memory only: restarting the simulator clears them.
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from typing import Any

SERVICES: tuple[str, ...] = ("inventory", "payment", "shipping")

#: Upper bound on how long a request may be held by ``hang`` (seconds).
HANG_MAX_SECONDS = 600.0
#: Upper bound accepted for ``latency_ms`` (ten minutes), to catch unit mistakes.
MAX_LATENCY_MS = 600_000.0

_RATE_FIELDS = ("transient_rate", "permanent_rate", "lost_reply_rate")
_BOOL_FIELDS = ("hang", "down")


class FaultValidationError(ValueError):
    """A ``PUT /_faults/<service>`` body that cannot be applied; nothing was changed."""


@dataclasses.dataclass(frozen=True)
class ServiceFaults:
    latency_ms: float = 0.0
    transient_rate: float = 0.0
    permanent_rate: float = 0.0
    lost_reply_rate: float = 0.0
    hang: bool = False
    down: bool = False
    seed: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_FIELDS = frozenset(f.name for f in dataclasses.fields(ServiceFaults))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_update(update: object) -> dict[str, Any]:
    """Check a fault update and return it normalised; raise `FaultValidationError` if invalid."""
    if not isinstance(update, dict):
        raise FaultValidationError("body must be a JSON object")
    unknown = sorted(set(update) - _FIELDS)
    if unknown:
        raise FaultValidationError(f"unknown fault keys: {', '.join(unknown)}")
    clean: dict[str, Any] = {}
    for name, value in update.items():
        if name == "latency_ms":
            if not _is_number(value) or not math.isfinite(value) or not 0 <= value <= MAX_LATENCY_MS:
                raise FaultValidationError(f"latency_ms must be a number between 0 and {MAX_LATENCY_MS:g}")
            clean[name] = float(value)
        elif name in _RATE_FIELDS:
            if not _is_number(value) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise FaultValidationError(f"{name} must be a number between 0 and 1")
            clean[name] = float(value)
        elif name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise FaultValidationError(f"{name} must be true or false")
            clean[name] = value
        elif name == "seed":
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise FaultValidationError("seed must be an integer or null")
            clean[name] = value
    return clean


class FaultBoard:
    """The current faults of every service, plus the machinery to hold hanging requests."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._faults: dict[str, ServiceFaults] = {service: ServiceFaults() for service in SERVICES}
        self._rngs: dict[str, random.Random] = {service: random.Random() for service in SERVICES}
        self._closing = False

    def get(self, service: str) -> ServiceFaults:
        # Replacing a frozen dataclass in a dict is atomic; readers never see half an update.
        return self._faults[service]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._cond:
            return {service: faults.as_dict() for service, faults in self._faults.items()}

    def update(self, service: str, update: object) -> ServiceFaults:
        clean = validate_update(update)
        with self._cond:
            new = dataclasses.replace(self._faults[service], **clean)
            self._faults[service] = new
            if "seed" in clean:
                self._rngs[service] = random.Random(clean["seed"])
            self._cond.notify_all()
            return new

    def reset_service(self, service: str) -> None:
        with self._cond:
            self._faults[service] = ServiceFaults()
            self._rngs[service] = random.Random()
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._faults = {service: ServiceFaults() for service in SERVICES}
            self._rngs = {service: random.Random() for service in SERVICES}
            self._cond.notify_all()

    def roll(self, service: str, rate: float) -> bool:
        """True with probability ``rate``; draws nothing when the rate is 0 or 1."""
        if rate <= 0.0:
            return False
        if rate >= 1.0:
            return True
        with self._cond:
            return self._rngs[service].random() < rate

    def wait_while_hanging(self, service: str, max_seconds: float = HANG_MAX_SECONDS) -> None:
        """Block until ``hang`` is cleared for ``service``, the server closes, or ``max_seconds`` pass."""
        deadline = time.monotonic() + max_seconds
        with self._cond:
            while self._faults[service].hang and not self._closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    def close(self) -> None:
        """Release every hanging request (used at shutdown)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
