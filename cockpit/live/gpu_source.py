"""Where the engine's GPU readings come from: NVML as the environment allows, sampled off the
tick by a background `GpuSampler`, or, for the demo where NVML is unavailable, simulated GPUs
labelled as such and never passed off as measurements."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from cockpit.live.gpu import GpuSnapshot, NvmlSource
from cockpit.live.gpu_sampler import GpuSampler


def env_nvml_source() -> Any:
    """NVML as the environment allows (COCKPIT_NVML=off behaves as if no driver were present)."""
    return NvmlSource(environ=os.environ)


class SimulatedGpus:
    """The demo's stand-in where NVML is unavailable: simulated figures, labelled as such, and the
    real reason NVML is unavailable kept beside them — never passed off as measurements."""

    def __init__(self, count: int, name: str, reason: str | None, **figures: Any):
        from cockpit.live.fake_gpus import FakeGpus  # the demo's only: a live cockpit never imports it

        self._fake = FakeGpus(count, name=f"{name} (simulated)", **figures)
        self._reason = reason or "NVML unavailable"

    def sample(self) -> GpuSnapshot:
        snapshot = self._fake.sample()
        return replace(snapshot, available=False, simulated=True,
                       reason=f"{self._reason} — the demo shows SIMULATED GPUs, not measurements")

    def close(self) -> None:
        self._fake.close()


def live_gpus(interval: float = 1.0, *, simulate: int | None = None, name: str = "GPU", **figures: Any) -> GpuSampler:
    """A started background sampler over NVML; with `simulate`, simulated GPUs where NVML is unavailable."""
    source: Any = env_nvml_source()
    if simulate:
        probe = source.sample()
        if not probe.available:
            source.close()
            source = SimulatedGpus(simulate, name, probe.reason, **figures)
    return GpuSampler(source, interval=interval).start()
