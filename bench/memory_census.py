"""What the engine holds, counted by where it is held: a diagnostic for memory_30day.py's growth
(not a benchmark with a target; not in run_all.py).

    .venv/bin/python bench/memory_census.py [--ticks 4000] [--runs 5] [--gpus 2] [--top 15]

Drives the real `Engine` as memory_30day.py's part 1 does (1 s a tick, one line a run a tick, an
eval line every 10) for 2 × `--ticks` ticks. At tick T and at tick 2T (the same phase of every
bounded history) it walks everything reachable from the `Engine` object, breadth first, and counts
the objects under each attribute path (run ids folded to RUN, list items to []) and their bytes
(`sys.getsizeof`, an instance's `__dict__` included); then prints the paths that grew most between
T and 2T, beside the growth of the whole heap (memory_30day.py's measure) over the same ticks. A
path that keeps growing with T is memory kept per tick; heap growth that no path shows is held
outside the engine.
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import sys
import tempfile
from collections import Counter, deque
from datetime import timedelta
from pathlib import Path
from types import FunctionType, ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory_30day  # noqa: E402  (its campaign, clock and lines)

from cockpit.live.engine import Engine  # noqa: E402
from cockpit.live.fake_gpus import FakeGpus  # noqa: E402
from cockpit.plan.load import load_campaign  # noqa: E402

ATOMS = (int, float, str, bytes, bool, type(None))
RUN_KEY = re.compile(r"\.r\d+\b")
MAX_DEPTH = 14


def census(root: object) -> tuple[Counter[str], Counter[str]]:
    """Objects reachable from `root`, counted and sized by attribute path (each object once)."""
    seen: set[int] = set()
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    queue: deque[tuple[object, str]] = deque([(root, "engine")])
    while queue:
        item, path = queue.popleft()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ATOMS):
            counts[path] += 1
            sizes[path] += sys.getsizeof(item)
            continue
        if isinstance(item, (type, ModuleType, FunctionType)):
            continue
        counts[path + " (object)"] += 1
        own = getattr(item, "__dict__", None) if not isinstance(item, dict) else None
        sizes[path + " (object)"] += sys.getsizeof(item) + (sys.getsizeof(own) if isinstance(own, dict) else 0)
        children: list[tuple[object, str]] = []
        if isinstance(item, dict):
            children = [(v, f"{path}.{k}" if isinstance(k, str) and len(k) < 30 else f"{path}.*") for k, v in item.items()]
        elif isinstance(item, (list, tuple, deque, set, frozenset)):
            children = [(v, path + "[]") for v in item]
        else:
            names = list(getattr(item, "__dict__", {}) or {})
            for klass in type(item).__mro__:
                slots = getattr(klass, "__slots__", ())
                names += [slots] if isinstance(slots, str) else list(slots)
            children = [(getattr(item, n), f"{path}.{n}") for n in dict.fromkeys(names) if hasattr(item, n)]
        for child, child_path in children:
            child_path = RUN_KEY.sub(".RUN", child_path)
            if child_path.count(".") + child_path.count("[") < MAX_DEPTH:
                queue.append((child, child_path))
    return counts, sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=4000, help="T: the census runs at tick T and 2T")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if args.ticks < 1000 or args.ticks % 1000:
        parser.error("--ticks must be a multiple of 1,000")
    folder = Path(tempfile.mkdtemp(prefix="cockpit-census-"))
    try:
        clock = memory_30day.SimulatedTime(memory_30day.LOT_START + timedelta(minutes=5))
        handles = memory_30day.make_campaign(folder, args.runs, args.gpus, clock)
        engine = Engine(load_campaign(folder), clock=clock, gpus=FakeGpus(args.gpus, clock=clock), monotonic=clock.monotonic)
        counted: dict[int, Counter[str]] = {}
        sized: dict[int, Counter[str]] = {}
        heap: dict[int, dict[str, int]] = {}
        for tick in range(1, 2 * args.ticks + 1):
            clock.advance(1.0)
            ts = clock.now.timestamp()
            for handle in handles:
                handle.write(memory_30day.line(ts, tick))
                handle.flush()
            engine.tick()
            if tick in (args.ticks, 2 * args.ticks):
                gc.collect()
                heap[tick] = memory_30day.heap_parts()  # before the census allocates its own
                counted[tick], sized[tick] = census(engine)
                print(f"tick {tick:,}: {sum(counted[tick].values()):,} objects reachable "
                      f"({sum(sized[tick].values()) / 2**20:.2f} MB), heap {sum(heap[tick].values()) / 2**20:.2f} MB, "
                      f"{sys.getallocatedblocks():,} blocks allocated", flush=True)
        engine.close()
        for handle in handles:
            handle.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    t, t2 = args.ticks, 2 * args.ticks
    reachable = sum(sized[t2].values()) - sum(sized[t].values())
    parts = ", ".join(f"{name} {(heap[t2][name] - heap[t][name]) / t:+.1f}" for name in heap[t])
    print(f"between tick {t:,} and {t2:,}: heap {(sum(heap[t2].values()) - sum(heap[t].values())) / t:+.1f} bytes a tick "
          f"({parts}), reachable from the engine {reachable / t:+.1f} bytes a tick")
    first, second = counted[t], counted[t2]
    changes = sorted(((sized[t2][k] - sized[t].get(k, 0), second[k] - first.get(k, 0), k)
                      for k in set(first) | set(second)), reverse=True)
    print("grew most (bytes, objects, path):")
    for grown, change, path in changes[: args.top]:
        if grown > 0:
            print(f"  +{grown:,} B  +{change:,}  {path}")


if __name__ == "__main__":
    main()
