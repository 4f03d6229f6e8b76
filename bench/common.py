"""Shared helpers for yoke's benchmarks: medians of repeated runs and the machine line.

Every figure in docs/BENCHMARKS.md is a median of several runs with its min-max, and every
speed is also given as a ratio to a baseline measured in the same run, because this machine is
shared and noisy (2 cores).
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Figure:
        return cls(statistics.median(values), min(values), max(values))

    def fmt(self, unit: str = "", digits: int = 0) -> str:
        spec = f",.{digits}f"
        return f"{self.median:{spec}}{unit} ({self.low:{spec}}-{self.high:{spec}})"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{platform.python_implementation()} {platform.python_version()}, {cpu}, "
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()}"
    )
