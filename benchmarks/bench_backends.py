"""The same gradient pass on each backend: numba on the CPU, JAX on the CPU, JAX on a GPU.

The demo config (configs/demo.yaml: jet pT, |eta|, b-tag and N-jet soft cuts, jet-pT
moments, value + 4-parameter Jacobian) on ``--events`` generated events (half ttbar, half
Drell-Yan, kept under ``--data-dir`` and reused), its columns read once into one column
cache shared by every backend, so each timed pass is what an optimisation step runs:
the kernels on cached columns. For each backend: the first pass (compilation) and the
best of ``--repeat`` passes; the ratios to numba on the CPU; the largest relative
difference of every state and Jacobian leaf to numba's (they compute the same maths).
JAX on a GPU runs where JAX sees one (a JAX build with CUDA), and is left out, said so,
elsewhere: the script runs unchanged on a GPU machine.

    python benchmarks/bench_backends.py                    # 200k events, chunks of 50k
    python benchmarks/bench_backends.py --events 20000 --repeat 3
    python benchmarks/bench_backends.py --events 1000000 --chunksize 250000 --backends jax:gpu
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _leaves(states) -> dict:
    import numpy as np

    from analysis.stats import Histogram

    out = {}
    for name, st in states.items():
        for part in ("value", "jac"):
            import jax

            flat = jax.tree_util.tree_leaves_with_path(
                getattr(st.derived, part), is_leaf=lambda x: isinstance(x, Histogram))
            for path, leaf in flat:
                key = f"{name}/{part}/{jax.tree_util.keystr(path)}"
                if isinstance(leaf, Histogram):
                    leaf = np.concatenate([leaf.sumw_flow, leaf.sumw2_flow])
                out[key] = np.asarray(leaf, dtype=np.float64)
    return out


def largest_difference(a: dict, b: dict) -> float:
    """Largest difference of two passes' leaves, relative to each leaf's (or, for a
    mean's ``dmean``, its ``center``'s) largest magnitude."""
    import numpy as np

    worst = 0.0
    for key, x in a.items():
        y = b[key]
        scale = float(np.max(np.abs(x), initial=0.0))
        if "dmean" in key and key.replace("dmean", "center") in a:
            scale = max(scale, float(np.max(np.abs(a[key.replace("dmean", "center")]))))
        if scale > 0:
            worst = max(worst, float(np.nanmax(np.abs(x - y), initial=0.0)) / scale)
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--chunksize", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--data-dir", default=None,
                   help="where the generated files are kept (default: a temporary folder)")
    p.add_argument("--backends", default="jax:cpu,jax:gpu",
                   help="backend:device pairs timed beside numba:cpu (the reference every "
                        "ratio and difference is taken to), comma-separated; jax:gpu is "
                        "left out where JAX sees no GPU (default: jax:cpu,jax:gpu)")
    args = p.parse_args(argv)
    asked = [tuple(pair.split(":")) for pair in args.backends.split(",") if pair]
    if any(pair not in {("jax", "cpu"), ("jax", "gpu")} for pair in asked):
        p.error(f"--backends: expected jax:cpu and/or jax:gpu, got {args.backends!r}")

    import jax
    from bench_pass import best_of, demo_config

    from analysis.data.cache import ColumnCache
    from analysis.driver.runner import Evaluator
    from analysis.pipeline.backend import devices

    tmp = tempfile.TemporaryDirectory() if args.data_dir is None else None
    data_dir = Path(args.data_dir or tmp.name)
    config = demo_config(data_dir, args.events, 2, args.chunksize)
    has_gpu = bool(devices("gpu"))
    choices = [("numba", "cpu")] + [pair for pair in asked if pair[1] == "cpu" or has_gpu]
    cache = ColumnCache()
    rows, passes = [], {}
    params = config.initial_params()
    for backend, device in choices:
        with Evaluator(config, cache=cache, backend=backend, device=device) as ev:
            ev.run(order=1)  # fills the shared cache on the first backend (untimed read)
            step = {k: v * 1.01 for k, v in params.items()}
            warm, best, cpu = best_of(lambda ev=ev, step=step: ev.run(step, order=1), args.repeat)
            passes[backend, device] = ev.run(step, order=1)
        rows.append((backend, device, warm, best, cpu))
    numba_best = rows[0][3]
    print(f"{args.events} events, chunks of {args.chunksize}, columns cached; jax "
          f"{jax.__version__} ({', '.join(d.platform for d in jax.devices())}), "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print("| backend | device | first pass [s] | best [s] | CPU [s] | / numba cpu | largest difference |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for backend, device, warm, best, cpu in rows:
        diff = largest_difference(_leaves(passes["numba", "cpu"]), _leaves(passes[backend, device]))
        print(f"| {backend} | {device} | {warm:.2f} | {best:.3f} | {cpu:.3f} | "
              f"{best / numba_best:.2f}x | {diff:.1e} |")
    if not has_gpu and ("jax", "gpu") in asked:
        print("jax on gpu: not run (JAX sees no GPU on this machine)")

    from benchmarks.results_table import command_line, record

    command = command_line(__file__, argv)
    for backend, device, _, best, _ in rows[1:]:
        record(f"backends.{backend}_{device}",
               compares=f"cached gradient pass, JAX on the {device.upper()} / numba on the CPU",
               figure=best / numba_best, goal="", met=None, command=command,
               details={"numba_cpu_s": numba_best, "this_s": best, "events": args.events})
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
