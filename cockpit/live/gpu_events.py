"""NVML's event API on its own thread: Xid critical errors and ECC errors as they happen.

One event set for every GPU (`nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`), one daemon thread
waiting on it with a timeout (`nvmlEventSetWait_v2`), so stopping never waits longer than one
timeout; the set is freed once the thread is gone (never under a running wait). Where the driver
does not offer the events (a consumer GPU, a vGPU, an old driver) the watcher says so once and
stays off: the sampler's counters are then the only record."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cockpit.live.gpu_fields import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    HEALTH_EVENTS,
    NVML_ERROR_TIMEOUT,
    GpuEvent,
    as_int,
    error_text,
)

KEPT_EVENTS = 256  # the newest events a snapshot carries; readers remember the last number they saw


class EventWatcher:
    """Waits for Xid and ECC events of `devices` ((index, handle, uuid) triples) and keeps them."""

    WAIT_MS = 1000

    def __init__(self, nvml: Any, devices: list[tuple[int, Any, str | None]], clock: Callable[[], datetime]):
        self._nvml = nvml
        self._clock = clock
        self._uuids = {index: uuid for index, _, uuid in devices}
        self._handles = [(index, handle) for index, handle, _ in devices]
        self._events: deque[GpuEvent] = deque(maxlen=KEPT_EVENTS)
        self._number = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None
        self.problem: str | None = None  # why events are not watched (on some GPU), once known
        self.stopped_by: str | None = None  # why the waiting thread gave up, if it did
        self.registered: tuple[int, ...] = ()

    def start(self) -> EventWatcher:
        """Register every GPU that offers the events and start waiting; `problem` says why not."""
        nvml = self._nvml
        create = getattr(nvml, "nvmlEventSetCreate", None)
        if not callable(create) or not callable(getattr(nvml, "nvmlEventSetWait_v2", None)):
            self.problem = "this nvidia-ml-py has no event API (nvmlEventSetWait_v2)"
            return self
        try:
            self._set = create()
        except Exception as error:
            self.problem = f"nvmlEventSetCreate failed: {error_text(error)}"
            return self
        registered = []
        failures = []
        for index, handle in self._handles:
            wanted = HEALTH_EVENTS
            supported = getattr(nvml, "nvmlDeviceGetSupportedEventTypes", None)
            if callable(supported):
                try:
                    wanted &= int(supported(handle))
                except Exception:
                    pass  # ask for all three; registering says whether they are supported
            if not wanted:
                failures.append(f"GPU {index} offers none of them")
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(handle, wanted, self._set)
            except Exception as error:
                failures.append(f"GPU {index}: {error_text(error)}")
                continue
            registered.append(index)
        self.registered = tuple(registered)
        if not registered:
            self.problem = "; ".join(failures) or "no GPU to register"
            self._free()
            return self
        if failures:
            self.problem = "events not watched on " + "; ".join(failures)
        self._thread = threading.Thread(target=self._wait, name="cockpit-gpu-events", daemon=True)
        self._thread.start()
        return self

    def _wait(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, self.WAIT_MS)
            except Exception as error:
                if getattr(error, "value", None) == NVML_ERROR_TIMEOUT:
                    continue
                if self._stop.is_set():
                    return
                self.stopped_by = f"waiting for GPU events failed: {error_text(error)}; the counters are polled instead"
                return
            self._keep(data)

    def _keep(self, data: Any) -> None:
        kind_bits = as_int(getattr(data, "eventType", None)) or 0
        index = self._index_of(getattr(data, "device", None))
        uuid = self._uuids.get(index) if index is not None else None
        if kind_bits & EVENT_XID_CRITICAL:
            kind, xid = "xid", as_int(getattr(data, "eventData", None))
        elif kind_bits & (EVENT_DOUBLE_BIT_ECC | EVENT_SINGLE_BIT_ECC):
            kind, xid = "ecc", None
        else:
            return
        detail = "double-bit" if kind_bits & EVENT_DOUBLE_BIT_ECC else ("single-bit" if kind == "ecc" else None)
        with self._lock:
            self._number += 1
            self._events.append(GpuEvent(self._number, index if index is not None else -1, uuid, kind, xid, self._clock(), detail))

    def _index_of(self, device: Any) -> int | None:
        """The GPU index of an event's device handle when it is not the very object registered
        (the binding may build a new handle object): compared by value, then by the driver's index."""
        for index, handle in self._handles:
            if handle is device or handle == device:
                return index
        try:
            return int(self._nvml.nvmlDeviceGetIndex(device))
        except Exception:
            return None

    def events(self) -> tuple[GpuEvent, ...]:
        with self._lock:
            return tuple(self._events)

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop waiting and free the event set; False when the thread is stuck in the driver (then
        the set is left to the process's exit rather than freed under a running wait)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        self._free()
        return True

    def _free(self) -> None:
        if self._set is None:
            return
        event_set, self._set = self._set, None
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except Exception:
            pass
