"""Bulkheads' slots (issue 26, docs/operating/fairness.md): how many steps of each agent queue may be
Processing at once, and how many of those one owner may hold.

The claim (`sas_step_pick`, `sas_step_admit` in scheduler/sql/functions.sql) counts the
Processing steps of each queue and claims only into free slots; this module turns the settings
into the one argument those functions take, `{"slots": {queue: [slots, per owner]}, "default":
[slots, per owner]}`. The rule for an owner's part is written here only.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

from django.conf import settings


def owner_slots(*, slots: int, share: float) -> int:
    """The most of a bulkhead's `slots` one owner may hold: ceil(slots x share), at least 1."""
    return max(1, math.ceil(slots * share - 1e-9))


@lru_cache(maxsize=8)
def _limits(slots: tuple[tuple[str, int], ...], default: int, share: float) -> str:
    return json.dumps(
        {
            "slots": {queue: [n, owner_slots(slots=n, share=share)] for queue, n in slots},
            "default": [default, owner_slots(slots=default, share=share)],
        },
        sort_keys=True,
    )


def bulkhead_limits() -> str:
    """The claim functions' `p_bulkheads` (JSON text) from settings.SAS: BULKHEAD_SLOTS, and
    MAX_IN_FLIGHT_PER_OPERATION for a queue not listed, each with its owners' part
    (BULKHEAD_OWNER_SHARE)."""
    sas = settings.SAS
    return _limits(
        tuple(sorted(sas["BULKHEAD_SLOTS"].items())),
        int(sas["MAX_IN_FLIGHT_PER_OPERATION"]),
        float(sas["BULKHEAD_OWNER_SHARE"]),
    )
