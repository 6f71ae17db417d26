"""The kinds of checkpoint file the cockpit vets and reloads, as they cross from classify to the
vetting and to the reload child (which receives them as their plain strings, in JSON)."""

from __future__ import annotations

from enum import StrEnum


class FileKind(StrEnum):
    """What a file is read as: a torch.save file, a safetensors file, an npz archive."""

    torch = "torch"
    safetensors = "safetensors"
    npz = "npz"
