"""A tiny standard-library control client for the simulator, used by tests and the demo."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class SimulatorError(RuntimeError):
    """The simulator answered a control call with an error status."""

    def __init__(self, status: int, body: object) -> None:
        super().__init__(f"simulator answered {status}: {body!r}")
        self.status = status
        self.body = body


class SimulatorControl:
    """Drive the simulator's control endpoints (``/health``, ``/_faults``, ``/_ledger`` ...).

    >>> sim = SimulatorControl("http://127.0.0.1:8055")
    >>> sim.set_faults("payment", transient_rate=0.3, seed=7)  # doctest: +SKIP
    """

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        if urllib.parse.urlsplit(base_url).scheme not in {"http", "https"}:
            raise ValueError(f"the simulator URL must be http(s): {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        # The scheme was checked in __init__ (S310).
        request = urllib.request.Request(self.base_url + path, data=data, method=method)  # noqa: S310
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            with exc:
                raw = exc.read()
            try:
                detail: object = json.loads(raw)
            except ValueError:
                detail = raw.decode(errors="replace")
            raise SimulatorError(exc.code, detail) from None

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/health")
        return result

    def is_healthy(self) -> bool:
        try:
            return self.health().get("status") == "ok"
        except (OSError, SimulatorError, ValueError):
            return False

    def reset(self) -> None:
        """Clear ledger, idempotency store, tombstones, faults and stats."""
        self._call("POST", "/_reset")

    def faults(self) -> dict[str, dict[str, Any]]:
        result: dict[str, dict[str, Any]] = self._call("GET", "/_faults")["faults"]
        return result

    def set_faults(self, service: str, **faults: Any) -> dict[str, Any]:
        """Merge ``faults`` into ``service``'s faults and return the service's faults now in force."""
        result: dict[str, Any] = self._call("PUT", f"/_faults/{service}", faults)["faults"]
        return result

    def clear_faults(self) -> None:
        self._call("DELETE", "/_faults")

    def ledger(
        self, service: str | None = None, operation: str | None = None, key: str | None = None
    ) -> list[dict[str, Any]]:
        filters = {"service": service, "operation": operation, "key": key}
        query = urllib.parse.urlencode({name: value for name, value in filters.items() if value is not None})
        entries: list[dict[str, Any]] = self._call("GET", "/_ledger" + (f"?{query}" if query else ""))[
            "entries"
        ]
        return entries

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/_stats")
        return result
