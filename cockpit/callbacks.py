"""Kept for code written before the package layout: `from cockpit.callbacks import attach_to_trainer`
goes on working. The callbacks live in `cockpit.feed.callbacks`; new code imports them from there."""

from typing import Any

from cockpit.feed.callbacks import LightningReporting, TrainerReporting, attach_to_trainer  # noqa: F401

__all__ = ["attach_to_trainer", "TrainerReporting", "LightningReporting"]


def __getattr__(name: str) -> Any:
    """CockpitTrainerCallback and CockpitLightningCallback import their framework only when asked for."""
    from cockpit.feed import callbacks

    return getattr(callbacks, name)
