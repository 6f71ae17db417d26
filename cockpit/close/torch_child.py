"""The closing's torch reload, in a fresh process: `python -m cockpit.close.torch_child PATH…`
loads each file with torch.load(weights_only=True) on the CPU and prints one JSON line per file as
soon as it is known (so a timeout keeps the finished ones), or one {"fatal": …} line when torch
does not import. It imports nothing of the cockpit; every path was vetted before (CRC-32, the
pickle's globals) by `reloaders.torch_reload_many`."""

from __future__ import annotations

import json
import sys
import time


def main(paths: list[str]) -> int:
    try:
        import torch
    except Exception as error:
        print(json.dumps({"fatal": f"{type(error).__name__}: {error}"}), flush=True)
        return 3
    for path in paths:
        started = time.monotonic()
        try:
            torch.load(path, map_location="cpu", weights_only=True)
            result = {"path": path, "ok": True}
        except Exception as error:
            lines = str(error).strip().splitlines()
            result = {"path": path, "ok": False, "error": f"{type(error).__name__}: {lines[0] if lines else ''}"}
        result["seconds"] = round(time.monotonic() - started, 3)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
