"""The toy NanoAOD generator: ``write_dataset`` vs writing the same arrays with uproot.

What a user would otherwise run is their own uproot write of events they already
have; so the floor here is ``uproot.recreate`` + ``mktree`` + ``extend`` of the very
arrays the generator produced (same baskets), and the generator's own share is the
ratio. Formerly a timed test (``tests/data/test_generate.py``: 200k events in 2 files
under 10 s); the figures are in ``benchmarks/README.md``.

    python benchmarks/bench_generate.py                  # 200k events, 2 files
    python benchmarks/bench_generate.py --events 20000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pass import best_of  # noqa: E402  (one timing helper)

GOAL_S = 10.0  # the former timed test's bound (seconds, 200k events, 2 files)


def main(argv: list[str] | None = None) -> dict[str, float]:
    import uproot

    from analysis.data import generate as G

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        gen = lambda: G.write_dataset(out / "gen", process="ttbar",  # noqa: E731
                                      n_events=args.events, n_files=args.files, seed=0)
        warm, wall, cpu = best_of(gen, args.repeat)
        # The same arrays (generated once, outside the timing), written by uproot alone.
        arrays, first = [], 0
        for i, n in enumerate(G.split_events(args.events, args.files)):
            arrays.append(G._generate("ttbar", n, seed=0, file_index=i, first_event=first))
            first += n

        def floor() -> None:
            for i, a in enumerate(arrays):
                with uproot.recreate(out / f"floor_{i}.root") as f:
                    tree = None
                    for s in range(0, len(a["event"]), G.BASKET_EVENTS):
                        chunk = {k: v[s : s + G.BASKET_EVENTS] for k, v in a.items()}
                        if tree is None:
                            tree = f.mktree("Events", chunk)
                        else:
                            tree.extend(chunk)

        _, floor_wall, floor_cpu = best_of(floor, args.repeat)
    print(f"{args.events} events, {args.files} files (best of {args.repeat}; first {warm:.2f} s)")
    print(f"  write_dataset (generate + write): {wall:6.2f} s wall  {cpu:6.2f} s CPU")
    print(f"  uproot write of the same arrays:  {floor_wall:6.2f} s wall  {floor_cpu:6.2f} s CPU")
    print(f"  ratio: {wall / floor_wall:.2f}x wall, {cpu / floor_cpu:.2f}x CPU"
          f"  (former test's bound: {GOAL_S:.0f} s wall at 200k events)")
    return {"wall": wall, "cpu": cpu, "floor_wall": floor_wall, "floor_cpu": floor_cpu}


if __name__ == "__main__":
    main()
