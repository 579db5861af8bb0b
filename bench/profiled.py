"""
pyinfra's CLI under cProfile (process CPU time) with CPython's cyclic garbage collector watched
(`gc.callbacks`): how many collections of each generation, their CPU time, and how many objects
the oldest generation held at each full collection. bench/profile_converge.py runs it; one run:

    python bench/profiled.py OUT.json [--pstats OUT.pstats] -- -y INVENTORY deploy.py

OUT.json: cpu (the process's user + system seconds at the end), collections, CPU seconds and
objects collected per generation, the oldest generation's size at each full collection, and
the objects the collector tracks at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import sys
import time


class CollectorWatch:
    """Counts and times the collector's runs (gc.callbacks), by generation."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.collected = [0, 0, 0]
        self.oldest: list[int] = []  # generation 2's size at each full collection
        self._start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        generation = info["generation"]
        if phase == "start":
            if generation == 2:
                self.oldest.append(len(gc.get_objects(generation=2)))
            self._start = time.process_time()
            return
        self.seconds[generation] += time.process_time() - self._start
        self.count[generation] += 1
        self.collected[generation] += info["collected"]

    def summary(self) -> dict:
        return {
            "collections": self.count,
            "collector_seconds": [round(s, 4) for s in self.seconds],
            "collected": self.collected,
            "oldest_at_full": self.oldest,
        }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--pstats")
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    pyinfra_args = argv[cut + 1 :]
    watch = CollectorWatch()
    gc.callbacks.append(watch)
    profile = cProfile.Profile(time.process_time) if args.pstats else None
    sys.argv = ["pyinfra", *pyinfra_args]
    if profile:
        profile.enable()
    code = 0
    try:
        from pyinfra_cli.main import main as pyinfra_main

        pyinfra_main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        if profile:
            profile.disable()
        gc.callbacks.remove(watch)
    usage = os.times()
    result = {
        "argv": pyinfra_args,
        "exit": code,
        "cpu": round(usage.user + usage.system, 4),
        "tracked_at_end": len(gc.get_objects()),
        **watch.summary(),
    }
    with open(args.out, "w") as out:
        json.dump(result, out, indent=1)
    if profile:
        profile.dump_stats(args.pstats)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
