"""A test harness on a virtual clock (issue 31): a workflow's runs through the real state
machine and the real database, fake remote services scripted per call, the supervisor's sweep
on demand, and a clock that jumps deadlines, backoffs and cron occurrences. No broker and no
worker process. docs/developing/testing.md is the guide."""

from __future__ import annotations

from .clock import VirtualClock, virtual_clock
from .engine import Delivery, Harness, harness_open, timed
from .remotes import FakeCall, HarnessError, answer, fail, hang, refuse, time_out

__all__ = [
    "Delivery",
    "FakeCall",
    "Harness",
    "HarnessError",
    "VirtualClock",
    "answer",
    "fail",
    "hang",
    "harness_open",
    "refuse",
    "time_out",
    "timed",
    "virtual_clock",
]
