"""State of the simulator: ledger, idempotency store, effects, tombstones and stats.

In memory; a restart starts from an empty state unless the simulator keeps a journal
(`--journal PATH`, issue 22's chaos soak kills it with -9): then every change is appended to that
file, one JSON line per record, and replayed at start, so a remote service that crashes comes
back with what it did - as a real one would. The changes of one business call are written in one
`write()` after the call (`SimulatorState.atomic`), before its answer is sent: a crash before it
loses the call whole (the client saw no answer, and a retry applies it once), never half of it.
Stats are not journaled.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class KeyedLocks:
    """One `threading.Lock` per key, created on demand and dropped when nobody holds or waits on it.

    `hold` takes several keys at once, always in sorted order, so two requests that need the same
    pair of keys cannot deadlock.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    def _checkout(self, key: str) -> threading.Lock:
        with self._guard:
            lock, users = self._locks.get(key, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._locks[key] = (lock, users + 1)
            return lock

    def _checkin(self, key: str) -> None:
        with self._guard:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    @contextlib.contextmanager
    def hold(self, *keys: str) -> Iterator[None]:
        ordered = sorted(set(keys))
        with contextlib.ExitStack() as stack:
            for key in ordered:
                lock = self._checkout(key)
                stack.callback(self._checkin, key)
                lock.acquire()
                stack.callback(lock.release)
            yield

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


@dataclasses.dataclass(frozen=True)
class StoredResponse:
    """The first response given for an idempotency key, replayed for later calls with that key."""

    service: str
    operation: str
    status: int
    body: dict[str, Any]


@dataclasses.dataclass
class Effect:
    """A forward effect (reservation, charge, shipment) that a compensation may undo."""

    effect_id: str
    compensated_by: str | None = None


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


class SimulatorState:
    """All mutable state. Every method is thread-safe; `key_locks` serialises work per key."""

    def __init__(self, journal: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._journal_fd: int | None = None
        self.key_locks = KeyedLocks()
        self._ledger: list[dict[str, Any]] = []
        self._seq = 0
        self._responses: dict[str, StoredResponse] = {}
        self._effects: dict[tuple[str, str], Effect] = {}
        self._tombstones: set[tuple[str, str]] = set()
        self._stats: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._echo_calls: collections.Counter[str] = collections.Counter()
        if journal is not None:
            if journal.exists():
                self._replay(journal)
            self._journal_fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # -- journal -----------------------------------------------------------------------------------

    def _replay(self, journal: Path) -> None:
        for line in journal.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                break  # a torn last line: the call it belonged to never answered
            kind = record[0]
            if kind == "r":
                self._responses.setdefault(record[1], StoredResponse(*record[2:6]))
            elif kind == "e":
                self._effects[(record[1], record[2])] = Effect(record[3])
            elif kind == "c":
                self._effects[(record[1], record[2])].compensated_by = record[3]
            elif kind == "v":
                self._tombstones.add((record[1], record[2]))
            elif kind == "l":
                self._ledger.append(record[1])
                self._seq = max(self._seq, int(record[1]["seq"]))
            elif kind == "x":
                self._echo_calls[record[1]] += 1

    def _log(self, *record: Any) -> None:
        if self._journal_fd is None:
            return
        batch: list[str] | None = getattr(self._local, "batch", None)
        line = json.dumps(record, separators=(",", ":")) + "\n"
        if batch is not None:
            batch.append(line)
        else:
            os.write(self._journal_fd, line.encode())

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """The journal records made inside are written together, in one write(), at the end."""
        self._local.batch = []
        try:
            yield
        finally:
            lines, self._local.batch = self._local.batch, None
            if lines and self._journal_fd is not None:
                os.write(self._journal_fd, "".join(lines).encode())

    def reset(self) -> None:
        with self._lock:
            if self._journal_fd is not None:
                os.ftruncate(self._journal_fd, 0)
            self._echo_calls = collections.Counter()
            self._ledger = []
            self._seq = 0
            self._responses = {}
            self._effects = {}
            self._tombstones = set()
            self._stats = collections.Counter()

    # -- idempotency -----------------------------------------------------------------------------

    def stored_response(self, key: str) -> StoredResponse | None:
        with self._lock:
            return self._responses.get(key)

    def store_response(self, key: str, response: StoredResponse) -> None:
        with self._lock:
            if key not in self._responses:
                self._responses[key] = response
                self._log("r", key, response.service, response.operation, response.status, response.body)

    # -- effects and tombstones -------------------------------------------------------------------

    def effect(self, service: str, key: str) -> Effect | None:
        with self._lock:
            return self._effects.get((service, key))

    def add_effect(self, service: str, key: str, effect: Effect) -> None:
        with self._lock:
            self._effects[(service, key)] = effect
            self._log("e", service, key, effect.effect_id)

    def compensate(self, service: str, key: str, by_key: str) -> Effect | None:
        """Mark the forward effect of ``key`` as undone by ``by_key``; None if nothing to undo."""
        with self._lock:
            effect = self._effects.get((service, key))
            if effect is None or effect.compensated_by is not None:
                return None
            effect.compensated_by = by_key
            self._log("c", service, key, by_key)
            return effect

    def is_voided(self, service: str, key: str) -> bool:
        with self._lock:
            return (service, key) in self._tombstones

    def void(self, service: str, key: str) -> None:
        with self._lock:
            if (service, key) not in self._tombstones:
                self._tombstones.add((service, key))
                self._log("v", service, key)

    # -- ledger ------------------------------------------------------------------------------------

    def append_ledger(
        self, service: str, operation: str, key: str, effect_id: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        with self._lock:
            self._seq += 1
            entry = {
                "seq": self._seq,
                "service": service,
                "operation": operation,
                "key": key,
                "effect_id": effect_id,
                "payload": payload,
                "at": _now(),
            }
            self._ledger.append(entry)
            self._log("l", entry)
            return entry

    def ledger(
        self, service: str | None = None, operation: str | None = None, key: str | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            entries = list(self._ledger)
        return [
            entry
            for entry in entries
            if (service is None or entry["service"] == service)
            and (operation is None or entry["operation"] == operation)
            and (key is None or entry["key"] == key)
        ]

    # -- echo ------------------------------------------------------------------------------------

    def echo_call(self, key: str) -> int:
        """Count a call to /echo with Idempotency-Key `key`; returns its number (1 = first)."""
        with self._lock:
            self._echo_calls[key] += 1
            self._log("x", key)
            return self._echo_calls[key]

    # -- stats -------------------------------------------------------------------------------------

    def count(self, service: str, operation: str, outcome: str) -> None:
        with self._lock:
            self._stats[(service, operation, outcome)] += 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._stats)
        services: dict[str, dict[str, dict[str, int]]] = {}
        for (service, operation, outcome), n in sorted(counts.items()):
            services.setdefault(service, {}).setdefault(operation, {})[outcome] = n
        return {"total": sum(counts.values()), "services": services}
