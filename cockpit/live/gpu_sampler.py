"""The background GPU sampler: a source's blocking `sample()` on its own daemon thread, and the
latest snapshot for readers that must never wait on NVML (the UI thread, the headless loop)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from cockpit.common.times import utc_now
from cockpit.live.gpu import Clock, GpuAlert, GpuSnapshot, GpuSource, Monotonic, _error_text, _logger



class GpuSampler:
    """Runs a source's `sample()` on its own daemon thread every `interval` seconds and keeps the
    latest snapshot. Readers (the UI thread, the headless loop) never touch NVML: `latest()` only
    reads an attribute. When no sweep has finished for `stall_factor` × `interval`, the snapshot
    says NVML is not answering: a hung driver call must show, not freeze the screen."""

    def __init__(
        self,
        source: GpuSource,
        *,
        interval: float = 1.0,
        stall_factor: float = 5.0,
        clock: Clock = utc_now,
        monotonic: Monotonic = time.monotonic,
    ):
        if interval <= 0:
            raise ValueError("the GPU sampling interval must be positive")
        self.source = source
        self.interval = float(interval)
        self.stall_after = float(interval) * float(stall_factor)
        self._clock = clock
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest = GpuSnapshot(available=False, reason="waiting for the first GPU sample")
        self._progress_at = monotonic()  # the last moment the thread proved it is alive
        self._closed = False

    def start(self) -> GpuSampler:
        if self._thread is None and not self._closed:
            self._progress_at = self._monotonic()
            self._thread = threading.Thread(target=self._run, name="cockpit-gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        next_due = self._monotonic()
        while not self._stop.is_set():
            try:
                snapshot = self.source.sample()
            except Exception as error:  # a bug in a source must not kill sampling for good
                _logger().exception("GPU sampling failed")
                snapshot = GpuSnapshot(
                    available=False, reason=f"GPU sampling failed: {_error_text(error)}", taken_at=self._clock()
                )
            self._latest = snapshot
            now = self._monotonic()
            self._progress_at = now
            # Fixed rate, no catching up: a slow sweep delays the next one instead of piling up.
            next_due = max(next_due + self.interval, now)
            self._stop.wait(max(0.0, next_due - now))

    def latest(self) -> GpuSnapshot:
        """The newest snapshot, at once, never blocking."""
        snapshot = self._latest
        if self._thread is None or self._closed:
            return snapshot
        silent = self._monotonic() - self._progress_at
        if silent <= self.stall_after:
            return snapshot
        alert = GpuAlert(
            "nvml-not-answering",
            f"NVML is not answering: no GPU sample for {silent:.0f} s (a driver call is hung); "
            + ("GPU figures shown are stale" if snapshot.samples else "no GPU figures yet"),
        )
        return replace(snapshot, answering=False, alerts=snapshot.alerts + (alert,))

    def age_seconds(self) -> float | None:
        """Seconds since the latest snapshot was taken; None before the first one."""
        return self._latest.age_seconds(self._clock())

    @property
    def answering(self) -> bool:
        return self.latest().answering

    def close(self, timeout: float = 2.0) -> None:
        """Stop the thread and shut the source down, once. A thread stuck in the driver is left
        behind (it is a daemon); the source then skips its shutdown."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.source.close()

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
