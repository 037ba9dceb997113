"""Where a training step's seconds go, from the time fields of one or more runs' metrics.jsonl: the step, the
rollout by role (each sampler call of `stages`: rows, new tokens, seconds), grading, old log-probs and the
update by adapter. Medians over the steps after --skip (the first step captures CUDA graphs).

    python bench/steps.py runs/evalopt-ip runs/single-ip        # one table per run
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from data import read_jsonl  # noqa: E402  (a cut-off last line, as of a run being written, is skipped with a warning)


def breakdown(path, skip=1):
    """{"steps": n, "total", "rollout", "reward", "old_logprobs", "update": median seconds, "roles": {role: {"calls",
    "rows", "tokens", "seconds"}: medians per step}, "adapters": {adapter: median update seconds}} for one run."""
    rows = read_jsonl(os.path.join(path, "metrics.jsonl"))
    rows = rows[skip:] if len(rows) > skip else rows
    med = lambda xs: statistics.median(xs) if xs else None
    out = {"steps": len(rows), **{k: med([r["time"][k] for r in rows]) for k in ("total", "rollout", "reward",
                                                                                   "old_logprobs", "update")}}
    per_step = []
    for r in rows:
        roles = defaultdict(lambda: [0, 0, 0, 0.0])
        for role, n, tokens, seconds in r["time"].get("stages") or []:
            for i, v in enumerate((1, n, tokens, seconds)):
                roles[role][i] += v
        per_step.append(roles)
    names = sorted({role for roles in per_step for role in roles})
    out["roles"] = {role: dict(zip(("calls", "rows", "tokens", "seconds"),
                                   (med([s[role][i] for s in per_step if role in s]) for i in range(4))))
                    for role in names}
    adapters = sorted({a for r in rows for a in r["time"].get("update_by_adapter", {})})
    out["adapters"] = {a: med([r["time"]["update_by_adapter"].get(a, 0.0) for r in rows]) for a in adapters}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories (train.py --out)")
    p.add_argument("--skip", type=int, default=1, help="leading steps left out (graph captures, warm-up)")
    args = p.parse_args()
    f = lambda x: "-" if x is None else f"{x:.2f}"
    for run in args.runs:
        b = breakdown(run, args.skip)
        print(f"{run}: medians over {b['steps']} steps (s): step {f(b['total'])}, rollout {f(b['rollout'])}, reward "
              f"{f(b['reward'])}, old log-probs {f(b['old_logprobs'])}, update {f(b['update'])}")
        for role, r in b["roles"].items():
            print(f"  rollout {role:13s} {r['calls']:.0f} calls {r['rows']:6.0f} rows {r['tokens']:8.0f} tokens "
                  f"{f(r['seconds'])} s")
        for adapter, seconds in b["adapters"].items():
            print(f"  update  {adapter:13s} {f(seconds)} s")


if __name__ == "__main__":
    main()
