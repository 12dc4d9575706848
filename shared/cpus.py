"""How many cores this process may use (cgroup-aware): the built-in embedder's thread count
and ORCHESTRATOR_WORKERS=auto both size themselves by it."""

from __future__ import annotations

import contextlib
import math
import os
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
