"""Benchmark: how fast the simulator writes a big cluster's replay files.

Generates ``--scenario`` (default ``mixed``) for ``--nodes`` x ``--hours`` (default 128 x 6, the
scale target: 1,024 GPUs at a 15 s scrape interval, ~32 M samples) into a temporary directory and,
as the baseline measured in the same run, times writing the same number of bytes with plain
``file.write`` calls. Prints the ratio, then ``simulate: nodes=<n> hours=<h> samples=<k> seconds=<s>``.

    .venv/bin/python bench/simulate.py [--nodes 128] [--hours 6] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.simulate import generate  # noqa: E402


def plain_write(path: Path, nbytes: int) -> float:
    """Seconds to write ``nbytes`` with 8 MiB ``write`` calls (the floor any generator pays)."""
    block = (b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 87 1793491200000\n" * 200_000)[: 8 << 20]
    t0 = time.perf_counter()
    with path.open("wb") as f:
        left = nbytes
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--scenario", default="mixed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR", help="write here and keep the files (default: a temp dir, removed)")
    args = ap.parse_args()
    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gangscope-bench-"))
    try:
        t0 = time.perf_counter()
        g = generate(args.scenario, out, seed=args.seed, nodes=args.nodes, hours=args.hours)
        seconds = time.perf_counter() - t0
        nbytes = sum(os.path.getsize(p) for p in g.directory.iterdir())
        (g.directory / "metrics.prom").unlink()  # free the space before the baseline writes as much
        base = plain_write(out / "baseline.bin", nbytes)
        print(f"bytes={nbytes} ({nbytes / 2**30:.2f} GiB) k8s_events={g.k8s_events} jobs={g.jobs}")
        print(f"baseline plain write: {base:.1f} s; simulator: {seconds:.1f} s; ratio {seconds / base:.2f}x; "
              f"{g.samples / seconds / 1e6:.2f} M samples/s")
        print(f"simulate: nodes={args.nodes} hours={args.hours:g} samples={g.samples} seconds={seconds:.1f}")
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
