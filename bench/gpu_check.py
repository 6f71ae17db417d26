"""The prepared check for a real GPU (issue 18 item 8): what this machine's NVML really offers the
cockpit's health record. Run it once on a GPU box and paste its output into bench/README.md.

    .venv/bin/python bench/gpu_check.py [--wait 5] [--json]

It samples every field once through the cockpit's own NvmlSource (the fields each GPU supports,
the health counters, serial, driver, MIG), registers for Xid and ECC events and waits `--wait`
seconds on the event thread, times one sampling sweep (median of 5, counters included), and
prints which fields are supported per GPU. It changes nothing on the GPU and needs no root.
Exit 0 when NVML answered, 1 when it is unavailable (the reason is printed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.live.gpu import NvmlSource  # noqa: E402
from cockpit.live.gpu_fields import GpuCounters  # noqa: E402

BASE_FIELDS = ("utilization_percent", "memory_used_bytes", "memory_total_bytes", "temperature_c", "power_draw_w",
               "power_limit_w", "sm_clock_mhz", "memory_clock_mhz", "throttle_reasons", "processes")
COUNTERS = tuple(GpuCounters.__dataclass_fields__)


def check(wait: float, nvml=None) -> dict:
    """The whole check; `nvml` stands in for pynvml in the test that keeps this script working."""
    source = NvmlSource(nvml)
    try:
        first = source.sample()
        if not first.available:
            return {"available": False, "reason": first.reason}
        time.sleep(wait)  # the event thread waits meanwhile: an Xid or ECC event in these seconds is listed
        sweeps = []
        for _ in range(5):
            for gpu in source._gpus:  # noqa: SLF001  forget the cached counters: the sweep timed reads them too
                gpu.health = None
            started = time.perf_counter()
            snapshot = source.sample()
            sweeps.append(time.perf_counter() - started)
        gpus = []
        for sample in snapshot.samples:
            counters = sample.counters.as_dict() if sample.counters else {}
            gpus.append({
                "index": sample.index, "name": sample.name, "uuid": sample.uuid, "serial": sample.serial, "lost": sample.lost,
                "supported": [f for f in BASE_FIELDS if getattr(sample, f) is not None],
                "hidden": sorted(sample.hidden),
                "counters_supported": [c for c in COUNTERS if c in counters],
                "counters_not_reported": [c for c in COUNTERS if c not in counters],
                "counters": counters,
                "mig": sample.mig,
                "mig_instances": len(sample.mig_instances) if sample.mig_instances is not None else None,
            })
        return {
            "available": True,
            "driver_version": snapshot.driver_version,
            "events_watched": snapshot.events_watched,
            "events_note": snapshot.events_note,
            "events_seen": [{"gpu": e.index, "kind": e.kind, "xid": e.xid, "detail": e.detail} for e in snapshot.events],
            "waited_seconds": wait,
            "sweep_ms_median": round(1000 * statistics.median(sweeps), 2),
            "sweep_ms_max": round(1000 * max(sweeps), 2),
            "warnings": list(snapshot.warnings),
            "gpus": gpus,
        }
    finally:
        started = time.perf_counter()
        source.close()  # stops the event thread (one wait timeout at most) and shuts NVML down
        close_seconds = time.perf_counter() - started
        print(f"closed in {close_seconds:.2f} s (event thread stopped, NVML shut down)", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wait", type=float, default=5.0, help="seconds to wait for Xid/ECC events (default 5)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args()
    result = check(args.wait)
    if args.json or not result["available"]:
        print(json.dumps(result, indent=2))
        return 0 if result["available"] else 1
    print(f"driver {result['driver_version']}; events watched: {result['events_watched']}"
          + (f" ({result['events_note']})" if result["events_note"] else ""))
    print(f"events in {result['waited_seconds']:g} s: {result['events_seen'] or 'none'}")
    print(f"one sweep with counters: median {result['sweep_ms_median']} ms, max {result['sweep_ms_max']} ms")
    for gpu in result["gpus"]:
        print(f"GPU {gpu['index']} {gpu['name']} serial {gpu['serial']} uuid {gpu['uuid']}{' LOST' if gpu['lost'] else ''}"
              + (f" MIG with {gpu['mig_instances']} instances" if gpu["mig"] else ""))
        print(f"  fields: {', '.join(gpu['supported'])}" + (f"; hidden: {', '.join(gpu['hidden'])}" if gpu["hidden"] else ""))
        print(f"  counters: {', '.join(gpu['counters_supported']) or 'none'}"
              + (f"; not reported: {', '.join(gpu['counters_not_reported'])}" if gpu["counters_not_reported"] else ""))
    for warning in result["warnings"]:
        print(f"note: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
