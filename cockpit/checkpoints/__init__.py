"""Checkpoint files read without running them: torch pickles scanned by a reader that imports
nothing, CRC-32 damage, safetensors and .npy headers by hand.

It lies below `close` and `resume`, which both vet files with it (the closing before it hands a
deliverable to torch.load, verify-resume before its reload), and imports nothing else of cockpit.
This file and `headers` stay plain standard-library Python that an older interpreter parses too:
the reload's child process imports them under the training environment's interpreter (`--python`).
"""


class CheckpointUnreadable(Exception):
    """The file cannot be read as a checkpoint; the message is the plain cause."""
