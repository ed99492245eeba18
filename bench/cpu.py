"""The machine's busy CPU time, from /proc/stat: what a burst costs in CPU, whichever process
(workers, PostgreSQL, Redis, the simulator, the submitting client) spent it. No dependencies:
the baselines import it from their own venvs."""

from __future__ import annotations

import os

_HZ = os.sysconf("SC_CLK_TCK")


def busy_cpu_seconds() -> float:
    """CPU seconds spent not idle (user, nice, system, irq, softirq, steal) since boot, all cores."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / _HZ


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave to other guests while this machine wanted them (the
    "steal" column of /proc/stat), since boot, all cores: a shared machine's noise, measured."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return fields[7] / _HZ
