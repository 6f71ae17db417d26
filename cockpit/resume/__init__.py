"""Checkpoints: what a checkpoint holds and whether a run can resume from it (verify-resume)."""
