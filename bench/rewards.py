"""Benchmark (not a test): code-reward throughput, in programs per second, on the MBPP reference solutions:
one program at a time (rewards.code_check in a loop) versus parallel (rewards.grade, one worker per CPU).

Every program is a full sandbox run (fresh interpreter, fork, rlimits, audit hook), so this is the cost the
trainer pays per code episode. Left out: math grading (microseconds per answer unless sympy is needed).
Run: python bench/rewards.py [--data PATH | --data builtin] [--limit N] [--workers W]
With its own root (rewards._own_root: root, unshare -m -n), the parallel run is repeated without it, side by side,
so the mounts' cost shows as a ratio.
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import data  # noqa: E402
import rewards  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "mbpp" / "mbpp.jsonl"),
                    help="MBPP-style JSONL with reference solutions, or 'builtin' for our generated code tasks")
    ap.add_argument("--limit", type=int, default=None, help="use the first N problems (default: all)")
    ap.add_argument("--workers", type=int, default=None, help="parallel workers for grade() (default: one per CPU)")
    args = ap.parse_args()
    if args.data == "builtin":
        probs = data.builtin_problems("code", n=args.limit or 500)
    else:
        probs = data.load_problems(args.data, task="code", limit=args.limit)
    comps = [f"```python\n{p['solution']}\n```" for p in probs]
    n, workers = len(probs), args.workers or os.cpu_count()

    t0 = time.perf_counter()
    seq = [rewards.code_check(c, p)[0] for c, p in zip(comps, probs)]
    t_seq = time.perf_counter() - t0
    t0 = time.perf_counter()
    par = rewards.grade(comps, probs, max_workers=workers)
    t_par = time.perf_counter() - t0

    print(f"programs: {n} ({args.data if args.data == 'builtin' else Path(args.data).name})  cpus: {os.cpu_count()}  workers: {workers}")
    print(f"one at a time: {n / t_seq:6.1f} programs/s  ({t_seq:.1f} s, {sum(seq):.0f}/{n} passed)")
    print(f"parallel     : {n / t_par:6.1f} programs/s  ({t_par:.1f} s, {sum(r for r, _ in par):.0f}/{n} passed)")
    print(f"speed-up     : {t_seq / t_par:.2f}x")
    if root := rewards._own_root(sys.executable):  # the same parallel run with the plain dir (no root of its own), then with it again
        times = {}
        for name, dirs in (("plain dir", ""), ("own root", root), ("plain dir", ""), ("own root", root)):
            rewards._own_root, t0 = (lambda *python, d=dirs: d), time.perf_counter()
            passed = sum(r for r, _ in rewards.grade(comps, probs, max_workers=workers))
            times.setdefault(name, []).append(time.perf_counter() - t0)
            print(f"parallel, {name}: {n / times[name][-1]:6.1f} programs/s ({passed:.0f}/{n} passed)")
        print(f"own root / plain dir, best of 2: {min(times['own root']) / min(times['plain dir']):.2f}x the time")


if __name__ == "__main__":
    main()
