"""How many cores this process may use (cgroup-aware): the built-in embedder's thread count
and ORCHESTRATOR_WORKERS=auto both size themselves by it."""

from __future__ import annotations

import contextlib
import math
import os
import threading
from pathlib import Path


def cgroup_cpu_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> float | None:
    """The CPU quota (in cores) of this process's cgroup and its ancestors, None = unlimited.
    cgroup v2 `cpu.max` ("max 100000" / "200000 100000"), else v1 `cpu.cfs_quota_us`."""
    limits: list[float] = []
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hierarchy, _, path = line.partition("::")
        if hierarchy != "0":
            continue
        folder = root / path.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                quota, period = (folder / "cpu.max").read_text().split()[:2]
                if quota != "max":
                    limits.append(int(quota) / int(period))
            if folder == root or root not in folder.parents:
                break
            folder = folder.parent
    with contextlib.suppress(OSError, ValueError):
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota_us > 0 and period_us > 0:
            limits.append(quota_us / period_us)
    return min(limits) if limits else None


def available_cpus() -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return max(1, cpus)


def run_at_idle_priority() -> bool:
    """Makes the calling thread run only on CPU time the process's other threads and the
    machine's other processes leave over (Linux `SCHED_IDLE`): background work such as an
    index build then takes idle cores at once but gives way to a caller's request as soon as
    that request has work, without a pause that guesses how long the request runs. Returns
    whether the policy took effect (it does not on systems without it, where the thread keeps
    its priority)."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is None:
        return False
    try:
        os.sched_setscheduler(threading.get_native_id(), policy, os.sched_param(0))
    except OSError:
        return False
    return True
