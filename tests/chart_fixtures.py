"""Fixed series for the chart tests: the seed campaign's three runs and its clock, fed through the
same store the engine feeds (deterministic: no clock, no randomness)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

from cockpit.live.series import SeriesStore

STEP_SECONDS = 4.0


def seed_series(campaign, now):
    """ctrl-r1 learning slowly (F1 to ~0.78), v-r16 crossing the 0.80 threshold, v-r64 turning NaN
    at step 6000 and stopped by nan-loss; checkpoints every 2000 steps, one verified resume."""
    store = SeriesStore.for_campaign(campaign)
    start = campaign.lot.start.timestamp() + 2 * 3600
    shapes = {
        "ctrl-r1": (0.78, 12000, None),
        "v-r16": (0.84, 10000, None),
        "v-r64": (0.70, 6000, 6000),
    }
    for run_id, (reach, last_step, nan_at) in shapes.items():
        feed = store.observer(run_id)
        line = 0
        for step in range(0, last_step + 1, 20):
            line += 1
            ts = start + step * STEP_SECONDS
            record = {"ts": ts, "step": step, "loss": 0.35 + 2.0 * math.exp(-step / 2500)}
            if step % 500 == 0:
                record["eval/macro_f1"] = round(0.45 + (reach - 0.45) * (1 - math.exp(-step / 3000)), 4)
            if nan_at is not None and step >= nan_at:
                record["loss"] = math.nan
            feed(record, line, None)
            if step and step % 2000 == 0:
                line += 1
                feed({"ts": ts + 1, "event": "checkpoint", "path": f"runs/{run_id}/checkpoints/step-{step}.pt", "seconds": 11.5}, line, None)
                if step == 2000:
                    line += 1
                    feed({"ts": ts + 40, "event": "resume_verified", "path": f"runs/{run_id}/checkpoints/step-2000.pt", "seconds": 31.0}, line, None)
    stop_ts = start + 6000 * STEP_SECONDS + 2
    store.runs["v-r64"].take_log_event({"type": "alert", "rule": "nan-loss", "step": 6000}, stop_ts)
    store.runs["v-r64"].take_log_event({"type": "stop", "rule": "nan-loss", "last": {"step": 6000}}, stop_ts + 1)
    lot_start = campaign.lot.start
    hours = 0.0
    while lot_start + timedelta(hours=hours) <= now:
        committed = max(0.0, 48.0 - hours + (0.12 * hours if hours > 10 else 0.0))
        store.note_clock(lot_start + timedelta(hours=hours), committed, 72.0 - hours)
        hours += 0.5
    return store.view()


def with_series(snapshot, campaign):
    return replace(snapshot, series=seed_series(campaign, snapshot.clock.now))
