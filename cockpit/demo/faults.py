"""`cockpit demo --gpu-fault KIND@SECONDS`: the demo's simulated GPUs suffer the faults asked for
(an Xid, an ECC error, thermal slowdown, an idle GPU), so a newcomer sees an incident raise its
alert, land in the run log as a `gpu_health` event and appear in `cockpit close`.

With the TUI the faults play in the cockpit's screen; with `--no-tui` the demo watches headless
until every fault has fired and its alert is in the run log (or its window has passed), printing
each alert, then leaves the runs going."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from cockpit.common.text import escape_control
from cockpit.live.fake_gpus import Fault
from cockpit.live.gpu_health import GPU_ECC, GPU_IDLE, GPU_THROTTLED, GPU_XID, HEALTH_EVENT
from cockpit.plan.campaign import Campaign

EXPECTED_RULE = {"xid79": GPU_XID, "xid48": GPU_XID, "ecc": GPU_ECC, "throttle": GPU_THROTTLED, "idle": GPU_IDLE}
GRACE_SECONDS = 15.0  # after a fault's window: the ticks, the run log's lock, a loaded box


def faulty_gpus(campaign: Campaign, faults: Sequence[Fault], interval: float = 1.0) -> Any:
    """A started sampler over simulated GPUs that suffer `faults` (their clock starts now). Always
    simulated, even on a GPU box: faults are never injected into measured figures."""
    from cockpit.live.gpu_source import SimulatedGpus
    from cockpit.live.gpu_sampler import GpuSampler

    source = SimulatedGpus(
        campaign.lot.gpu_count, campaign.lot.gpu_model,
        "the demo simulates GPU faults (--gpu-fault)",
        memory_total_bytes=24 * 2**30, power_limit_w=450.0, faults=list(faults),
    )
    return GpuSampler(source, interval=interval).start()


def deadline_seconds(campaign: Campaign, faults: Sequence[Fault]) -> float:
    """How long the headless demo watches: the last fault, its alert's window, a grace."""
    health = campaign.model.health
    window = {"throttle": health.throttle_minutes * 60.0, "idle": health.idle_minutes * 60.0}
    return max(f.after_seconds + window.get(f.kind, 0.0) for f in faults) + GRACE_SECONDS


def watch_faults(
    campaign: Campaign, faults: Sequence[Fault], *, say: Callable[[str], None] = print,
    interval: float = 1.0, monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Watch headless until each fault's alert is in the run log; 0 when all were, 1 when one was not."""
    from cockpit.live.engine import Engine

    engine = Engine(campaign, gpus=faulty_gpus(campaign, faults, interval))
    wanted = {(EXPECTED_RULE[f.kind], f.gpu) for f in faults}
    for fault in faults:
        say(f"GPU fault planned: {fault.describe()}")
    started = monotonic()
    limit = deadline_seconds(campaign, faults)
    seen: set[int] = set()
    raised: set[tuple[str, int]] = set()
    try:
        while monotonic() - started < limit and not wanted <= raised:
            snapshot = engine.tick()
            for alert in reversed(snapshot.alerts):
                if alert.seq is None or alert.seq in seen:
                    continue
                seen.add(alert.seq)
                say(escape_control(f"{monotonic() - started:5.0f} s  ALERT [{alert.rule}] {alert.message}"))
            for event in engine.log.read().events:
                if event["type"] == "alert" and event.get("gpu") is not None and isinstance(event.get("health_seq"), int):
                    raised.add((str(event.get("rule")), int(event["gpu"])))
            if not wanted <= raised:
                sleep(interval)
    finally:
        engine.close()
    incidents = sum(1 for e in engine.log.read().events if e["type"] == HEALTH_EVENT)
    missing = sorted(wanted - raised)
    say(f"the run log holds {incidents} gpu_health event{'s' if incidents != 1 else ''}; "
        f"`cockpit close {campaign.directory}` lists the hardware incidents")
    if missing:
        say("not raised in time: " + ", ".join(f"{rule} on GPU {gpu}" for rule, gpu in missing))
        return 1
    return 0
