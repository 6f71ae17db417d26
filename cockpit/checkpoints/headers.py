"""Headers read by hand: a safetensors file's (its JSON header against the file's sizes) and a
0-d .npy member's value. Standard library only, and Python an older interpreter parses: the
reload's child process imports this module under the training environment's interpreter."""

from __future__ import annotations

import ast
import json
import math
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.checkpoints import CheckpointUnreadable


@dataclass
class SafetensorsHeader:
    tensor_count: int
    data_bytes: int
    metadata: dict[str, Any]


_SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E4M3FN": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_safetensors_header(path: Path) -> SafetensorsHeader:
    """8-byte little-endian header length, a JSON header, then the data; sizes must agree: each
    tensor's dtype × shape is the span of its data_offsets, and the spans tile the data exactly.

    The one reader of safetensors files: the closing's reload check, verify-resume's vetting and
    the reload child's check of a file torch cannot load all call it. Raises CheckpointUnreadable."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise CheckpointUnreadable("truncated: shorter than a safetensors header")
            (length,) = struct.unpack("<Q", prefix)
            if length > min(size - 8, 100_000_000):
                raise CheckpointUnreadable(
                    f"truncated or not safetensors: the header claims {length} bytes, the file holds {size}"
                )
            raw = handle.read(length)
    except OSError as error:
        raise CheckpointUnreadable(f"cannot read it: {error.strerror or error}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise CheckpointUnreadable("damaged: the safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise CheckpointUnreadable("damaged: the safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_size = size - 8 - length
    spans = []
    for name, entry in header.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has no data_offsets in the header")
        begin, end = offsets
        if not 0 <= begin <= end:
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has data_offsets [{begin}, {end}], not a byte range")
        if end > data_size:
            raise CheckpointUnreadable(
                f"truncated: tensor {name!r} ends at byte {end} of the data, past the end of the {data_size} "
                "bytes it holds (the save did not finish, or the copy was cut)"
            )
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has no shape in the header")
        bits = _SAFETENSORS_BITS.get(dtype) if isinstance(dtype, str) else None
        if bits is None:
            raise CheckpointUnreadable(f"damaged: tensor {name!r} has an unknown dtype {dtype!r}")
        expected = (math.prod(shape) * bits + 7) // 8
        if expected != end - begin:
            raise CheckpointUnreadable(
                f"damaged: tensor {name!r} is {dtype} {shape}, {expected} bytes, but its data_offsets span {end - begin}"
            )
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise CheckpointUnreadable(
                f"damaged: tensor {name!r} starts at byte {begin} of the data, not {position}: the tensors overlap or leave a gap"
            )
        position = end
    if position < data_size:
        raise CheckpointUnreadable(f"damaged: {data_size - position} bytes past the end the header describes")
    end = position
    return SafetensorsHeader(tensor_count=len(header), data_bytes=end, metadata=metadata if isinstance(metadata, dict) else {})


def npy_scalar(archive: zipfile.ZipFile, member: str) -> Any:
    """The value of a 0-d .npy member (int, float or str) read by hand; None if it is not one."""
    try:
        with archive.open(member) as handle:
            if handle.read(6) != b"\x93NUMPY":
                return None
            major = handle.read(2)[0]
            header_len = struct.unpack("<H" if major == 1 else "<I", handle.read(2 if major == 1 else 4))[0]
            header = ast.literal_eval(handle.read(header_len).decode("latin1"))
            if header.get("shape") != ():
                return None
            descr = header.get("descr", "")
            data = handle.read(4096)
    except (OSError, KeyError, ValueError, SyntaxError, IndexError, struct.error, zipfile.BadZipFile):
        return None
    formats = {"<i8": "<q", "<i4": "<i", "<u8": "<Q", "<u4": "<I", "<f8": "<d", "<f4": "<f", "|b1": "?"}
    if descr in formats:
        try:
            return struct.unpack(formats[descr], data[: struct.calcsize(formats[descr])])[0]
        except struct.error:
            return None
    if isinstance(descr, str) and descr.startswith("<U"):
        return data[: 4 * int(descr[2:])].decode("utf-32-le", "replace").rstrip("\x00")
    return None
