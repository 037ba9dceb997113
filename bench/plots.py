"""Per-run plots: training.png (train reward, held-out accuracy from train.py --eval-every; per-role entropy,
weight share and grad norm from metrics.jsonl) and eval.png (pass@1 ± se and greedy accuracy per checkpoint, from
the eval.jsonl lines `python eval.py --run RUN` wrote with its latest settings) in each run directory.

    python bench/plots.py runs/X [runs/Y ...]

Needs matplotlib (not a dependency of the project): without it the plots are skipped with a message.
Left out: plots across runs (bench/campaign.py --plot draws one per claim of the grid).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from data import read_jsonl  # noqa: E402


def plot_run(run, records):
    """training.png (reward; per-role entropy, weight share, grad norm from metrics.jsonl) and eval.png
    (pass@1 per checkpoint) in the run directory -> their paths."""
    try:
        from matplotlib.figure import Figure  # not pyplot: files only, no display, no global figure state
    except ImportError as e:
        print(f"plots skipped: matplotlib is not available ({e}); pip install matplotlib to get them")
        return []
    figs, metrics = {}, read_jsonl(os.path.join(run, "metrics.jsonl"))  # figs: path -> Figure
    if metrics:
        fig = figs[os.path.join(run, "training.png")] = Figure(figsize=(11, 7), layout="tight")
        axes = fig.subplots(2, 2)
        axes[0, 0].plot([m["step"] for m in metrics], [m["reward_mean"] for m in metrics], label="train reward")
        if held := [(m["step"], m["eval_accuracy"]) for m in metrics if "eval_accuracy" in m]:  # train.py --eval-every
            axes[0, 0].plot(*zip(*held), "o--", label="held-out accuracy")
        for ax, key in zip(axes.flat, ("reward", "entropy", "weight_share", "grad_norm")):
            for role in dict.fromkeys(r for m in metrics for r in m["roles"]) if key != "reward" else []:
                ax.plot(*zip(*[(m["step"], m["roles"][role][key]) for m in metrics if role in m["roles"]]), label=role)
            ax.set(title=key.replace("_", " ") + (" per role" if key != "reward" else ""), xlabel="step")
            ax.legend(fontsize=8)
    if records:
        fig = figs[os.path.join(run, "eval.png")] = Figure(figsize=(6, 4), layout="tight")
        ax = fig.subplots()
        ax.errorbar([r["step"] for r in records], [r["pass@1"] for r in records],
                    yerr=[r["pass@1_se"] for r in records], marker="o", capsize=3, label="pass@1 ± se")
        if greedy := [(r["step"], r["greedy"]) for r in records if r["greedy"] is not None]:
            ax.plot(*zip(*greedy), "s--", label="greedy")
        ax.set(xlabel="step", ylabel="accuracy", title=f"{records[0]['workflow']} / {records[0]['policy']}")
        ax.legend()
    for path, fig in figs.items():
        fig.savefig(path, dpi=100)
    print("plots: " + (", ".join(figs) or "nothing to plot"))
    return list(figs)


def main(argv=None):
    runs = sys.argv[1:] if argv is None else argv
    if not runs or not all(os.path.isdir(r) for r in runs):
        sys.exit("usage: python bench/plots.py RUN_DIR [RUN_DIR ...] (run directories of train.py --out)")
    for run in runs:
        lines = read_jsonl(os.path.join(run, "eval.jsonl"), quiet=True)
        records = sorted((r for r in lines if r["settings"] == lines[-1]["settings"]), key=lambda r: r["step"]) if lines else []
        plot_run(run, records)


if __name__ == "__main__":
    main()
