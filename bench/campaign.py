"""Campaign runner for issue 16's grid: train a named list of configurations on the GPUs it is given,
evaluate every checkpoint, append one JSON record per finished run to docs/results/campaign.jsonl.

    python bench/campaign.py single-s0 single-s1 --gpus 0 --per-gpu 2      # two runs side by side on GPU 0
    python bench/campaign.py voting-ip-merged-s0 --gpus 0,1 --runs /root/runs --logs /root/logs
    python bench/campaign.py voting-ip-s0 --runs /root/runs --until 40     # to step 40 only, no record yet
    python bench/campaign.py voting-ip-s0 --runs /root/runs                # later: resumes it to 100, records
    python bench/campaign.py voting-sp-s0 --runs /root/runs --extra "--steps 140"   # recorded at 100: extend it
    python bench/campaign.py voting-sp-s0 --runs /root/runs --grow 20      # then 120, 140, ... each recorded
    python bench/campaign.py single-s1 --transfer voting,evalopt,orchworkers   # + its adapter in every role (C2)
    python bench/campaign.py single-s0 --task code --runs /root/runs           # MBPP -> HumanEval
    python bench/campaign.py single-s0 --model /root/mdl15/hf --model-name Qwen2.5-Coder-1.5B-Instruct
    python bench/campaign.py --plot                                        # one PNG per claim from the file
    python bench/campaign.py --table                                       # the grid table(s), Markdown
    python bench/campaign.py --record-lost /tmp/x/runs/orchworkers-ip-s0   # a cell lost mid-run -> lost.jsonl
    python bench/campaign.py --compare voting-ip-s0 voting-ip-merged-s0    # two cells step by step, A - B +- se
                                                      (a cell lost mid-run: from lost.jsonl, beside the results file)
    python bench/campaign.py --list                                        # the configurations and the grid

A run name is CONFIG-sSEED (CONFIG from CONFIGS below). `--task code` (issue 17) adds `--task code
--max-new-tokens 512` to the grid's flags and by default trains on MBPP without its test split (task ids 11-510;
the rest is written to RUNS/mbpp/train-outside-11-510.jsonl) and evaluates on all 164 HumanEval problems
(--eval-problems is capped at the file's size). A record is keyed by (config, seed, model, task), and a run's
folder, log and lock are NAME for the 0.5B math grid, else NAME-TASK and/or NAME-MODEL (--model-name), so
cells of another task or model never resume, skip or overwrite these. Every run gets the GRID flags (the fixed settings
of the 0.5B grid), then its config's own flags, then --extra (e.g. a tiny smoke test: --model tiny
--extra "--steps 4 --problems 2 --group 4 --max-new-tokens 24"). Each run is its own process:
`train.py ... --save-every EVAL_EVERY` (or `train.py --out DIR --resume --steps STEPS` when its folder holds a
checkpoint), then `eval.py --run DIR --data EVAL --problems P --n N`, which scores step 0 (base) and every
checkpoint. While train.py runs, each new checkpoint is evaluated by the same command (one at a time, in
the run's own log, never a .tmp folder being written; before the first checkpoint, which eval.py --run
needs, step 0 alone by eval.py's own functions once config.json exists), its caching allocator capped at
BESIDE_MEMORY of the GPU (CAPPED); a failed one is logged, training goes on. Training that fails after a new
checkpoint is resumed from it (record: resumed_after_failure_at); with no new one since its start, the run fails. After training the command runs once more for what is left, timed as the record's eval_wall_s
(with the wait for one still running; eval_while_training: true; --no-eval-while-training evaluates only
after training). --until STEP (a multiple of --eval-every below the run's steps) trains
only to STEP (`--steps STEP`, or `--resume --steps STEP`), evaluates, and writes no record: a later call
without it resumes the folder and finishes it (with --no-cosine the lr does not depend on --steps once the
warm-up cap --steps / 4 is the same, so this equals training straight through; train.py's resume is exact).
bench/carry.sh takes a run folder's last checkpoint from one GPU session to the next (its header says how).
--per-gpu K runs K at once per GPU (CUDA_VISIBLE_DEVICES, expandable segments). A run whose
(config, seed, model) is already in the results file is skipped unless --force (which reruns it from scratch and
replaces it) or more --steps are asked for than it has (--extra "--steps 140" on a 100-step record: its folder is
resumed from the recorded step's checkpoint, as after --until, and the record replaced; extended_from in the record
names the old steps; without that checkpoint, e.g. on a fresh machine, it is skipped with the reason).
Logs: LOGS/NAME.log (every command and its output); a status line per running run every --status-every s.
LOGS/NAME.lock is held (flock) while a run's job lives: a second campaign on the same run fails at once
("already running"), and bench/carry.sh pack refuses to pack it. A record names the checkpoint steps that
have no evaluation (missing_steps, with a warning) and how many starts of train.py made the run (sessions:
its wall times are the last session's only).

Left out: multi-GPU runs (torchrun) for one configuration, retrying a failed evaluation after training (its
log says why; the next call resumes from there), --transfer evaluations (C2's single-agent-in-every-role rows:
eval.py --transfer on a finished single run, by hand for now), stopping a run's concurrent evaluation when
training fails (run_job waits for it: what it writes is kept for the next call).
"""
import argparse
import datetime
import fcntl
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from data import load_problems, read_jsonl  # noqa: E402  (eval.py's reader: a cut-off last line skipped, warned)
RESULTS = os.path.join(ROOT, "docs", "results", "campaign.jsonl")
LOST = os.path.join(ROOT, "docs", "results", "lost.jsonl")  # --record-lost: cells cut off with the machine, kept apart
# The grid's fixed settings (docs/results.md, "The 0.5B grid"): the same for every run. Constant lr after
# warm-up: a cosine decay over ~100 steps would shrink the late updates and hide post-peak declines.
GRID = ["--task", "math", "--problems", "16", "--group", "8", "--max-new-tokens", "384", "--lr", "1e-4",
        "--warmup", "5", "--no-cosine", "--steps", "100", "--eval-every", "0"]
# --task code (issue 17): MBPP outside its test split (task ids 11-510) -> HumanEval (all 164 problems); 512 new
# tokens per call, as the code base diagnostics (docs/results.md), since solutions run longer than GSM8K's answers
TASKS = {"math": ([], "gsm8k/train.jsonl", "gsm8k/test.jsonl"),
         "code": (["--task", "code", "--max-new-tokens", "512"], "mbpp/mbpp.jsonl", "humaneval/HumanEval.jsonl")}
MBPP_TEST = range(11, 511)
DEFAULT_MODEL = "Qwen2.5-Coder-0.5B-Instruct"
CONFIGS = {  # name -> train.py flags on top of GRID
    "single": ["--workflow", "single", "--policy", "ip"],
    "evalopt-ip": ["--workflow", "evalopt", "--policy", "ip"],
    "evalopt-sp": ["--workflow", "evalopt", "--policy", "sp"],
    "evalopt-sp-rb": ["--workflow", "evalopt", "--policy", "sp", "--loss-agg", "role-balanced"],
    "voting-ip": ["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance"],
    "voting-ip-merged": ["--workflow", "voting", "--policy", "ip", "--parallel-steps", "merged"],
    "voting-sp": ["--workflow", "voting", "--policy", "sp"],
    "voting-sp-rb": ["--workflow", "voting", "--policy", "sp", "--loss-agg", "role-balanced"],
    "orchworkers-ip": ["--workflow", "orchworkers", "--policy", "ip", "--parallel-steps", "per-instance"],
    "orchworkers-ip-merged": ["--workflow", "orchworkers", "--policy", "ip", "--parallel-steps", "merged"],
    # the reference's cut of the workers' rows (fixed-size mini-batches, not one step per worker slot): C5's fidelity
    "orchworkers-ip-minibatch": ["--workflow", "orchworkers", "--policy", "ip", "--parallel-steps", "minibatch"],
    # I6 on the per-instance runs (C5): lambda 0.5 on the parallel role, the EMA window at its default (128)
    "voting-ip-i6": ["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance",
                     "--coherence", "generator=0.5"],
    "orchworkers-ip-i6": ["--workflow", "orchworkers", "--policy", "ip", "--parallel-steps", "per-instance",
                          "--coherence", "worker=0.5"],
    # the judging roles' collapse (issue 16: the evaluator that stops judging, the aggregator that writes N): I1, a
    # KL anchor to the base model on the judge (0.05, README's example, not tuned), and I6 on the judge (0.5)
    "evalopt-ip-i1": ["--workflow", "evalopt", "--policy", "ip", "--kl", "evaluator=0.05"],
    "evalopt-ip-i6j": ["--workflow", "evalopt", "--policy", "ip", "--coherence", "evaluator=0.5"],
    "voting-ip-i1": ["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance",
                     "--kl", "aggregator=0.05"],
    "voting-ip-i6j": ["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance",
                      "--coherence", "aggregator=0.5"],  # I6 on Voting's judge: one lease, where Eval-Opt needs 2-3
}
CLAIMS = {  # claim -> the configs its figure shows (C1: every run)
    "C1": list(CONFIGS),
    "C2": ["single", "evalopt-ip", "voting-ip", "orchworkers-ip"],
    "C3": ["evalopt-ip", "evalopt-sp"],
    "C4": ["evalopt-ip", "evalopt-sp", "evalopt-sp-rb", "voting-ip", "voting-sp", "voting-sp-rb"],
    "C5": ["voting-ip", "voting-ip-merged", "orchworkers-ip", "orchworkers-ip-merged", "orchworkers-ip-minibatch"],
    "I6": ["voting-ip", "voting-ip-i6", "orchworkers-ip", "orchworkers-ip-i6"],
    "judges": ["evalopt-ip", "evalopt-ip-i1", "evalopt-ip-i6j", "voting-ip", "voting-ip-i1", "voting-ip-i6j"],
}
SKIP = {"out", "resume", "device", "model", "model_used", "data", "eval_data", "eval_every", "eval_problems"}


def parse_name(name):
    """'voting-ip-merged-s1' -> ('voting-ip-merged', 1)."""
    config, _, seed = name.rpartition("-s")
    if config not in CONFIGS or not seed.isdigit():
        sys.exit(f"error: {name!r} is not CONFIG-sSEED with CONFIG one of {', '.join(CONFIGS)}")
    return config, int(seed)


def extra_flags(extra):
    """--extra's train.py flags as a list, --steps=N / --warmup=N split in two (main reads a run's steps and
    warm-up from them); either flag without an integer after it, or abbreviated, -> one line, exit 2."""
    flags = []
    for tok in extra.split():
        flag, eq, value = tok.partition("=")
        if flag in ("--steps", "--warmup") and eq:
            flags += [flag, value]
            continue
        if flag.startswith("--tas"):  # a record's task and the key that skips it must agree: --task sets both
            sys.exit(print("error: --extra: give the task as campaign.py's own --task, not in --extra", file=sys.stderr) or 2)
        if any(len(flag) >= 4 and full.startswith(flag) and flag != full for full in ("--steps", "--warmup")):
            sys.exit(print(f"error: --extra: write {flag} in full (--steps or --warmup): the run's steps are "
                           "read from --extra", file=sys.stderr) or 2)
        flags.append(tok)
    for i, flag in enumerate(flags):
        if flag in ("--steps", "--warmup") and not (i + 1 < len(flags) and flags[i + 1].isdigit()):
            sys.exit(print(f"error: --extra {extra!r}: {flag} needs a whole number after it (--steps 8 or "
                           "--steps=8)", file=sys.stderr) or 2)
    return flags


def data_name(path):
    """'/work/shared/data/gsm8k/train.jsonl' -> 'gsm8k/train.jsonl'; built-in problems (None, '') -> 'builtin'."""
    return "builtin" if not path or path.startswith("builtin") else "/".join(os.path.normpath(path).split(os.sep)[-2:])


def sh(*cmd):
    """A command's stripped output, or None when it fails."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def git_commit():
    """The COMMIT file of a copy of the checkout (the GPU machine gets no .git), else HEAD."""
    path = os.path.join(ROOT, "COMMIT")
    return open(path).read().strip() if os.path.exists(path) else sh("git", "-C", ROOT, "rev-parse", "HEAD") or "unknown"


def gpu_name(gpu):
    return "cpu" if gpu == "cpu" else sh("nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", gpu) or "unknown"


def point(step, r):
    """A curve point from an eval.py result: step, pass@1, se, and right (each problem's right samples) when the
    result has it (eval.py from commit 9a3379f on): then two points on the same problems compare paired."""
    return {"step": step, "pass@1": r["pass@1"], "se": r["pass@1_se"]} | ({"right": r["right"]} if "right" in r else {})


def difference(a, b, n, same_problems=True):
    """(a - b in pass@1, its standard error, paired?) for two curve points of n samples per problem. Paired when
    both have per-problem counts and the caller knows they are of the same problems (the se of the mean per-problem
    difference: what two checkpoints share, the problems' difficulty, cancels); else unpaired, sqrt(se_a^2 + se_b^2)."""
    d = a["pass@1"] - b["pass@1"]
    if same_problems and len(ra := a.get("right") or []) == len(rb := b.get("right") or []) > 1:
        per = [(x - y) / n for x, y in zip(ra, rb)]
        return d, statistics.stdev(per) / len(per) ** 0.5, True
    return d, (a["se"] ** 2 + b["se"] ** 2) ** 0.5, False


def judge_point(step, diagnostics):
    """The judging role at one evaluated step, from eval.py's diagnostics (None without a judge): Voting, the share
    of the aggregator's picks that fell back to solution 1 (no number in its reply), with its pick accuracy (right
    picks when some candidate was right) and the voters' accuracy where eval.py gives them (a blind pick scores
    about candidate_accuracy / P(some candidate right)); Eval-Opt, the shares of the evaluator's verdicts that
    approve and that are unparseable (its collapse so far: never approving)."""
    if (a := diagnostics.get("aggregator")) and a.get("picks"):
        return {"step": step, "default_picks": a["default_picks"] / a["picks"],
                **{k: a[k] for k in ("pick_accuracy", "candidate_accuracy") if k in a}}
    e = diagnostics.get("evaluator") or {}
    if n := sum(e.get(k, 0) for k in ("approved_right", "approved_wrong", "rejected_right", "rejected_wrong")):
        return {"step": step, "approved": (e["approved_right"] + e["approved_wrong"]) / n,
                "unparseable": e["unparseable"] / n}
    return None


def judge_curve(r):
    """A record's judge_curve, or for an older record (none) the judge at its base, peak and final diagnostics."""
    return r.get("judge_curve") or [j for s, k in sorted({r[k]["step"]: k for k in ("base", "peak", "final")}.items())
                                    if (j := judge_point(s, r["diagnostics"][k]))]


def build_record(run_dir, name, model_name, eval_data, eval_problems, eval_n, extra=None, steps=None):
    """One campaign record from a finished run folder: its config.json, metrics.jsonl and the eval.jsonl
    lines with these evaluation settings (one per step; a later line for a step wins). `steps`: the step the
    run was trained to (default config.json's, which a resume asking for no more steps than its checkpoint has
    leaves as it was); what the folder holds past it (a training process left running past the stop) stays out."""
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    steps = config.get("steps") if steps is None else steps
    evals = {s: r for s, r in evals_for(run_dir, eval_data, eval_problems, eval_n).items() if steps is None or s <= steps}
    if 0 not in evals or len(evals) < 2:
        raise ValueError(f"{run_dir}: eval.jsonl lacks the base or every checkpoint for these settings")
    curve = [point(s, r) for s, r in sorted(evals.items())]
    peak = max(curve, key=lambda p: p["pass@1"])  # the earliest step wins a tie
    metrics = [m for m in {m["step"]: m for m in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))}.values()
               if steps is None or m["step"] <= steps]
    # the checkpoints the run should have (every save_every steps and its last step) without an evaluation
    last, every = max((m["step"] for m in metrics), default=0), config.get("save_every") or 0
    should = {*range(every, last + 1, every), last} - {0} if every > 0 else {last} - {0}
    missing = sorted(should - set(evals))
    if missing:
        print(f"warning: {name}: no evaluation for checkpoint step(s) {', '.join(map(str, missing))} with these "
              f"settings (missing_steps in its record: its curve lacks them)", flush=True)
    times = [m["time"]["total"] for m in metrics]
    first = evals[0]["settings"]

    def per_role(key):  # {role: its `key` at each step, None where it has none (no row ran, no optimizer step)}
        return {role: [None if (v := m["roles"].get(role, {}).get(key)) is None else round(v, 4) for m in metrics]
                for role in (metrics[-1]["roles"] if metrics else ())}
    scales = {role: c for role, c in per_role("coherence_scale").items() if any(x is not None for x in c)}  # I6 only
    return {"name": name, "config": name.rpartition("-s")[0], "seed": config["seed"], "model": model_name,
            **{k: v for k, v in config.items() if k not in SKIP}, "steps": steps,
            "train_data": data_name(config["data"]), "eval_data": data_name(eval_data),
            "eval_problems": eval_problems, "eval_n": eval_n, "eval_temperature": first["temperature"],
            "eval_chunk": first.get("chunk"),
            "eval_seed": first["seed"], "curve": curve, "base": curve[0], "peak": peak, "final": curve[-1],
            "final_minus_base": curve[-1]["pass@1"] - curve[0]["pass@1"],
            "diagnostics": {k: evals[p["step"]]["diagnostics"] for k, p in
                            (("base", curve[0]), ("peak", peak), ("final", curve[-1]))},
            "judge_curve": [j for s, r in sorted(evals.items()) if (j := judge_point(s, r["diagnostics"]))],
            "missing_steps": missing, "sessions": len(config.get("starts", [])),
            "steps_done": len(metrics), "skipped_steps": sum(m["skipped_steps"] for m in metrics),
            "step_time_s": statistics.mean(times) if times else None,
            "step_time_median_s": statistics.median(times) if times else None,
            "train_curve": {"reward_mean": [round(m["reward_mean"], 4) for m in metrics],
                            # entropy None where no row of the role ran (every advantage 0): unknown, not 0
                            "entropy": per_role("entropy"), **({"coherence_scale": scales} if scales else {})},
            **({"transfers": t} if (t := transfers(run_dir, curve[-1]["step"])) else {}),
            "git_commit": git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **(extra or {})}


def status(job):
    """'train step 37/100, 5.1 s/step, ~5.4 min left' from the run's files."""
    try:
        return phase_status(job)
    except (OSError, ValueError, KeyError):  # a line being written
        return job["phase"]


def phase_status(job):
    if job["phase"] == "train":
        metrics = read_jsonl(os.path.join(job["dir"], "metrics.jsonl"), quiet=True)
        if not metrics:
            return "train starting"
        t = statistics.mean(m["time"]["total"] for m in metrics[-10:])
        return (f"train step {metrics[-1]['step']}/{job['target']}, {t:.1f} s/step, "
                f"~{(job['target'] - metrics[-1]['step']) * t / 60:.1f} min left"
                + (f"; evaluating (checkpoints up to step {job['evaluating']})" if job.get("evaluating") is not None
                   else ""))
    if job["phase"] == "eval":
        return f"eval, {len(read_jsonl(os.path.join(job['dir'], 'eval.jsonl'), quiet=True))} evaluation(s) written"
    return job["phase"]


def checkpoint_steps(run_dir):
    """The steps of run_dir's finished checkpoints (step_NNNNNN folders; step_NNNNNN.tmp is being written)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    return sorted(int(n[5:]) for n in names if n.startswith("step_") and n[5:].isdigit()
                  and os.path.isdir(os.path.join(run_dir, n)))


def evaluated_steps(run_dir, eval_data, eval_problems, eval_n):
    """The steps in run_dir/eval.jsonl with these settings; None while a line is being written (read again later)."""
    try:
        return set(evals_for(run_dir, eval_data, eval_problems, eval_n))
    except ValueError:
        return None


def eval_chunk(n):
    """The problems eval.py --run runs in lock-step with n samples each (eval.settings_and_problems; without
    importing eval.py, which loads torch): an evaluation made with another is another random stream."""
    return max(1, 256 // n)


def evals_for(run_dir, eval_data, eval_problems, eval_n):
    """{step: eval.jsonl line} for these evaluation settings and the run's own workflow, sampling temperature and
    adapters (not an `eval.py --run --transfer` or `--temperature` line: a later line for a step wins)."""
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    return {r["step"]: r for r in read_jsonl(os.path.join(run_dir, "eval.jsonl"))
            if r["settings"]["problems"] == eval_problems and r["settings"]["n"] == eval_n
            and r.get("workflow") in (None, config.get("workflow", r.get("workflow"))) and not r["settings"].get("transfer")
            and r["settings"].get("temperature") == config.get("temperature", r["settings"].get("temperature"))
            and r["settings"].get("chunk", 32) == eval_chunk(eval_n)
            and data_name(r["settings"]["data"]) == data_name(eval_data)}


# Evaluates only the base (step 0) of a run that has no checkpoint yet, which `eval.py --run` refuses: its
# settings and its eval.jsonl line as eval.py's main_run makes them (tests/test_campaign.py checks that
# `eval.py --run` with the same flags then skips step 0), from eval.py's own functions.
BASE_EVAL = """import json, os, sys
import eval as E
args = E.parse_args(['--run'] + sys.argv[1:])
run = args.run
config = json.load(open(os.path.join(run, 'config.json')))
task, name = config['task'], args.model or config['model_used']
s, problems = E.settings_and_problems(args, config, name, task)
path = os.path.join(run, 'eval.jsonl')
if any(r['step'] == 0 and r['settings'] == s for r in E.read_jsonl(path)):
    sys.exit(print(f'step 0: already in {path}, skipped'))
model, tok, _ = E.load_default_model(name, args.device)
r = E.evaluate(model, tok, problems, s['workflow'], E.adapter_map(s['workflow'], 'base'), task,
               **{k: s[k] for k in E.EVAL_KEYS})
E.append_jsonl(path, {'step': 0, 'checkpoint': 'base', 'workflow': s['workflow'], 'policy': config['policy'].upper(),
                      'task': task, 'model': name, 'settings': s, **r})
print(f"step 0 (base): pass@1 {r['pass@1']:.3f} +- {r['pass@1_se']:.3f}")
"""
POLL_S = 5  # how often run_job looks for a new checkpoint to evaluate while training
# An evaluation beside training runs with its caching allocator capped at this share of the GPU's memory (it
# frees its cache before passing the cap, and fails rather than take more): on 2026-12-01 the two processes'
# caches together exhausted an H200 and killed voting-ip-merged-s0's training at step 31. CAPPED runs `eval.py
# ARGS` or `-c CODE ARGS` (BASE_EVAL) as `python -c CAPPED FRACTION ...` under it.
BESIDE_MEMORY = 0.35
CAPPED = """import runpy, sys, torch
if torch.cuda.is_available():
    torch.cuda.set_per_process_memory_fraction(float(sys.argv[1]))
del sys.argv[:2]
if sys.argv[0] == '-c':
    exec(sys.argv.pop(1), {'__name__': '__main__'})
else:
    runpy.run_path(sys.argv[0], run_name='__main__')
"""


# A single-agent run's last adapter in every role of another workflow (C2: eval.py --adapters DIR --workflow W
# --transfer all ...): eval.py's result as JSON in argv[1] (written whole: a cut-off one is no file).
TRANSFER_EVAL = """import json, os, sys
import eval as E
r = E.main(sys.argv[2:])
json.dump(r, open(sys.argv[1] + '.tmp', 'w'))
os.replace(sys.argv[1] + '.tmp', sys.argv[1])"""
STRUCTURES = ("voting", "evalopt", "orchworkers")


def transfer_file(run_dir, workflow, step):
    return os.path.join(run_dir, f"transfer-{workflow}-step{step}.json")


def transfers(run_dir, step):
    """{workflow: {"step", "pass@1", "se", "diagnostics"}} of the run's TRANSFER_EVAL results for that step."""
    found = {w: json.load(open(f)) for w in STRUCTURES if os.path.exists(f := transfer_file(run_dir, w, step))}
    return {w: point(step, r) | {"diagnostics": r["diagnostics"]} for w, r in found.items()}


def start(cmd, env, log, beside=False):
    """Write the command to the log (BASE_EVAL by its name), start it with its output into the log. `beside`
    another process writing there (training's progress bar ends no line): on a line of its own."""
    names = {BASE_EVAL: "<BASE_EVAL of bench/campaign.py>", CAPPED: "<CAPPED of bench/campaign.py>",
             TRANSFER_EVAL: "<TRANSFER_EVAL of bench/campaign.py>"}
    text = " ".join(names.get(c, c) for c in cmd)
    log.write(("\n" if beside else "") + f"$ {text}\n")
    log.flush()
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def train_watching(job, train, evaluate, base_eval, env, log, args):
    """Run the training command; meanwhile (--eval-while-training) start `evaluate` whenever the run folder
    holds a checkpoint that eval.jsonl lacks for these settings (`base_eval` for step 0 while there is no
    checkpoint yet), one at a time. A failed evaluation is logged and leaves training alone (it is retried
    when a new checkpoint appears). After training, wait for the one running -> train.py's exit status."""
    d, proc, ev, failed_at = job["dir"], start(train, env, log), None, None
    while True:
        rc = proc.poll()
        if ev is not None and ev.poll() is not None:
            if ev.returncode:
                log.write(f"\ncampaign: the evaluation while training exited with {ev.returncode}; training goes on\n")
                log.flush()
                failed_at = ev.ckpts
            ev = job["evaluating"] = None
        if rc is not None:
            break
        if ev is None and args.eval_while_training and os.path.exists(os.path.join(d, "config.json")):
            ckpts = checkpoint_steps(d)
            done = evaluated_steps(d, args.eval_data, args.eval_problems, args.eval_n)
            if done is not None and {0, *ckpts} - done and ckpts != failed_at:
                cmd = evaluate if ckpts else base_eval
                ev = start([cmd[0], "-c", CAPPED, str(BESIDE_MEMORY), *cmd[1:]], env, log, beside=True)
                ev.ckpts, job["evaluating"] = ckpts, ckpts[-1] if ckpts else 0
        time.sleep(POLL_S)
    if ev is not None:
        if ev.wait():
            log.write(f"campaign: the evaluation while training exited with {ev.returncode}\n")
        job["evaluating"] = None
    return rc


def run_job(job, gpu, args, lock):
    """Hold LOGS/NAME.lock (flock, exclusive, not waiting) while the job lives: a second campaign on the same
    run folder (or the same name twice) fails at once instead of training it too; bench/carry.sh pack and
    unpack test the same lock. --force's removal of the folder happens under it."""
    path = os.path.join(args.logs, job["run"] + ".lock")
    with open(path, "a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            job["phase"] = f"FAILED: already running ({path} held)"
            return
        held.truncate(0)
        held.write(f"{os.getpid()}\n")
        held.flush()
        if args.force:
            shutil.rmtree(job["dir"], ignore_errors=True)
        locked_job(job, gpu, args, lock)


def locked_job(job, gpu, args, lock):
    """Train (to --until, else to the end), evaluate, append the record (not under --until); the phase is
    shown by the status loop."""
    # expandable segments (less fragmentation with K runs per GPU) unless the caller sets the allocator itself
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", **os.environ, "PYTHONUNBUFFERED": "1"}
    if gpu != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = gpu
    d, py, target = job["dir"], sys.executable, args.until or job["steps"]
    fresh = [py, "train.py", "--model", args.model, *(["--data", args.train_data] if args.train_data else []),
             *GRID, *TASKS[args.task][0], *CONFIGS[job["config"]], "--seed", str(job["seed"]), "--save-every", str(args.eval_every),
             *args.extra_flags, "--out", d]
    if checkpoint_steps(d) and os.path.exists(os.path.join(d, "config.json")):
        train = [py, "train.py", "--out", d, "--resume", "--steps", str(target)]  # an earlier call's: continue it
    else:
        shutil.rmtree(d, ignore_errors=True)  # nothing to resume (or --force)
        train = fresh + (["--steps", str(target)] if args.until else [])  # the last --steps wins
    flags = ["--problems", str(args.eval_problems), "--n", str(args.eval_n),
             *(["--data", args.eval_data] if args.eval_data else [])]
    evaluate = [py, "eval.py", "--run", d, *flags]
    base_eval = [py, "-c", BASE_EVAL, d, *flags]
    t0 = time.time()
    with open(os.path.join(args.logs, job["run"] + ".log"), "a") as log:
        job["phase"] = "train"
        begun, job["resumes"] = max(checkpoint_steps(d), default=0), []
        while train_watching(job, train, evaluate, base_eval, env, log, args):  # failed: resume if it got further
            if (last := max(checkpoint_steps(d), default=0)) <= begun:
                job["phase"] = f"FAILED in train (see {log.name})"
                return
            log.write(f"\ncampaign: training failed after its checkpoint at step {last}: resumed from there\n")
            begun, train = last, [py, "train.py", "--out", d, "--resume", "--steps", str(target)]
            job["resumes"].append(last)
        job["train_wall_s"], t0 = round(time.time() - t0), time.time()
        job["phase"] = "eval"
        if start(evaluate, env, log).wait():
            job["phase"] = f"FAILED in eval (see {log.name})"
            return
        job["eval_wall_s"] = round(time.time() - t0)  # after training: the wait for a running one included
        last = max((s for s in checkpoint_steps(d) if s <= target), default=0)  # not a later one left behind
        with open(os.path.join(d, "config.json")) as f:
            tokens = str(json.load(f)["max_new_tokens"])  # the run's tokens per call, for its transfers
        for w in [w for w in args.transfer if job["config"] == "single" and not args.until]:
            if not args.eval_data and job["seed"]:  # eval.py's built-in held-out problems follow the run's seed
                log.write(f"campaign: no transfer into {w}: the built-in held-out problems of seed {job['seed']} are "
                          "not eval.py --adapters' (seed 0); give --eval-data\n")
            elif not os.path.exists(out := transfer_file(d, w, last)):  # C2: the last adapter in every role of w
                job["phase"] = f"transfer into {w}"
                if start([py, "-c", TRANSFER_EVAL, out, "--model", args.model, "--workflow", w, "--transfer", "all",
                          "--adapters", os.path.join(d, f"step_{last:06d}"), "--task", args.task,
                          "--max-new-tokens", tokens, *flags], env, log).wait():
                    log.write(f"campaign: the transfer into {w} failed: the record goes without it\n")
    if args.until:
        job["phase"] = (f"stopped at step {max(checkpoint_steps(d), default=0)} (--until {args.until}): no record; "
                        "the same command without --until finishes it")
        return
    record = build_record(d, job["name"], args.model_name, args.eval_data, args.eval_problems, args.eval_n,
                          {"gpu": gpu_name(gpu), "runs_per_gpu": args.per_gpu, "train_wall_s": job["train_wall_s"],
                           "eval_wall_s": job["eval_wall_s"], "eval_while_training": args.eval_while_training,
                           "resumed_after_failure_at": job["resumes"], "extended_from": job["extended_from"],
                           "command": " ".join(fresh[1:]), "eval_command": " ".join(evaluate[1:])}, steps=target)
    with lock:
        save_record(args.results, record)
    job["phase"] = (f"done: base {record['base']['pass@1']:.3f}, peak {record['peak']['pass@1']:.3f} (step "
                    f"{record['peak']['step']}), final {record['final']['pass@1']:.3f} ± {record['final']['se']:.3f}")


def key(r):
    """A record's identity: its cell, and for a lost run also when it started (every attempt of a cell is kept)."""
    return (r["config"], r["seed"], r["model"], r.get("task", "math")) + ((r["lost"]["started"],) if "lost" in r else ())


def label(r):
    """A record's name in tables and figures; a lost run's with when it started and where it was lost."""
    return r["name"] + (f" (started {r['lost']['started'][:16]}, lost at {r['lost']['trained_to']})" if "lost" in r else "")


def lost_record(run_dir, model_name, eval_data, eval_problems, eval_n):
    """The record of a run the GPU machine took with it mid-run, from the folder detached.sh's poll brought back
    (runs.tgz: config.json, metrics.jsonl, eval.jsonl, no checkpoint): its curve up to its last evaluated step
    (`steps`), marked lost: trained_to (its last training step), planned_steps, started (config.json's mtime, which
    the tar keeps: when train.py began). Commit and GPU are the run's own (config.json's last start); eval_data None:
    its task's held-out file; its name is the cell's (the folder's without run_name's -TASK / -MODEL)."""
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    eval_data = TASKS[config.get("task", "math")][2] if eval_data is None else eval_data
    start = (config.get("starts") or [{}])[-1]
    started = datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(run_dir, "config.json")),
                                              datetime.timezone.utc).isoformat(timespec="seconds")
    trained = max((m["step"] for m in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))), default=0)
    folder, seed = os.path.basename(os.path.normpath(run_dir)), f"-s{config['seed']}"
    name = folder.rpartition(seed + "-")[0] + seed if seed + "-" in folder else folder
    lost = {"trained_to": trained, "planned_steps": config.get("steps"), "started": started}
    return build_record(run_dir, name, model_name, eval_data, eval_problems, eval_n,
                        {"lost": lost, "gpu": start.get("gpu", "unknown"), "git_commit": start.get("commit", "unknown")},
                        steps=max(evals_for(run_dir, eval_data, eval_problems, eval_n), default=0))


def run_name(name, task, model_name):
    """The run folder's (and its log's and lock's) name: NAME for the 0.5B math grid, else NAME-TASK and/or
    NAME-MODEL, so the cells of another task or model never resume or overwrite these."""
    model = "" if model_name == DEFAULT_MODEL else "-" + model_name.replace("/", "_")  # one folder, not nested
    return name + ("" if task == "math" else f"-{task}") + model


def mbpp_train(src, runs):
    """A code training file in MBPP's format (rows with task_id, text and test_list), whatever its name: its rows
    outside MBPP's test split (task ids 11-510) written to RUNS/mbpp/train-outside-11-510.jsonl (data_name:
    mbpp/train-outside-11-510.jsonl) -> that path; any other file -> src as it is."""
    lines = [line for line in open(src) if line.strip()]
    try:
        rows = [json.loads(line) for line in lines]
    except ValueError:  # not JSONL (a .json list, say): not MBPP's file
        return src
    if not all(isinstance(r, dict) and {"task_id", "text", "test_list"} <= set(r) for r in rows):
        return src
    dst = os.path.join(runs, "mbpp", "train-outside-11-510.jsonl")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(f"{dst}.{os.getpid()}.tmp", "w") as f:  # per process: campaigns starting at once each write their own
        f.writelines(line.rstrip("\n") + "\n" for line, r in zip(lines, rows) if r["task_id"] not in MBPP_TEST)
    os.replace(f"{dst}.{os.getpid()}.tmp", dst)
    return dst


def save_record(results, record):
    """Add `record` to the results file, replacing an older record of the same run (--force), keeping the
    rest. Under an flock on RESULTS.lock (another campaign process on the same checkout waits: two runs'
    records never overwrite each other), written to a temporary file and renamed, so a kill mid-write leaves
    the old file whole."""
    os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)
    with open(results + ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        keep = [r for r in read_jsonl(results) if key(r) != key(record)]
        with open(results + ".tmp", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in keep + [record])
        os.replace(results + ".tmp", results)


def plot(results, out_dir):
    """One PNG per claim and (model, task): held-out pass@1 vs step (± se band), one line per run; beside it each
    run's per-role training entropy (running mean over 5 steps); for the judges, also each run's judge_curve (records
    from commit 2b82164 on; older ones: base, peak and final as points); for I6, each run's coherence_scale per step
    (records from the twenty-fifth session on); C1, C5 and I6 one row of these per workflow.
    claim-C1.png for the 0.5B math grid, else claim-C1-MODEL-TASK.png; from lost.jsonl, lost-claim-C1.png. Claims with
    no runs yet are skipped."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    records = read_jsonl(results)
    groups = sorted({(r["model"], r.get("task", "math")) for r in records})
    for (model, task), claim in [(g, c) for g in groups for c in CLAIMS]:
        runs = [r for r in records if r["config"] in CLAIMS[claim] and (r["model"], r.get("task", "math")) == (model, task)]
        if not runs:
            continue
        judged = claim == "judges" and any(judge_curve(r) for r in runs)
        scaled = claim == "I6" and any(r["train_curve"].get("coherence_scale") for r in runs)  # a panel of I6's scale
        wide = judged or scaled  # a third column of panels
        # C5 and I6 compare variants within a workflow, and C1 has every run (too many lines for one panel): one
        # row of panels per workflow, else one row
        rows = sorted({r["workflow"] for r in runs}) if claim in ("C1", "C5", "I6") else [None]
        fig, axes = plt.subplots(len(rows), 3 if wide else 2, figsize=(18 if wide else 12, 4.5 * len(rows)),
                                 squeeze=False)
        for (a, b, *c), workflow in zip(axes, rows):
            mine = [r for r in runs if workflow in (None, r["workflow"])]
            for r in sorted(mine, key=label):
                steps, acc, se = (np.array([p[k] for p in r["curve"]]) for k in ("step", "pass@1", "se"))
                line, = a.plot(steps, acc, marker="o", label=label(r))
                a.fill_between(steps, acc - se, acc + se, color=line.get_color(), alpha=0.15)
                old = not r.get("judge_curve")  # an older record: its base, peak and final as points
                for key, style, mark in (("default_picks", "-", "o"), ("approved", "--", "s"),
                                         ("unparseable", ":", "x")) if judged else ():
                    if pts := [(j["step"], j[key]) for j in judge_curve(r) if key in j]:
                        c[0].plot(*zip(*pts), marker=mark, linestyle="none" if old else style, color=line.get_color(),
                                  label=f"{label(r)} {key}" + (" (base, peak, final)" if old else ""))
                for role, ent in r["train_curve"]["entropy"].items():
                    x = np.array(ent, dtype=float)  # None (no row ran) -> nan, left out of the running mean
                    smooth = [np.nanmean(x[max(0, i - 4):i + 1]) if np.isfinite(x[max(0, i - 4):i + 1]).any()
                              else np.nan for i in range(len(x))]  # trailing running mean over (up to) 5 steps
                    b.plot(np.arange(1, len(ent) + 1), smooth, color=line.get_color(),
                           linestyle=["-", "--", ":", "-."][list(r["train_curve"]["entropy"]).index(role) % 4],
                           label=f"{label(r)} {role}")
                for role, scale in r["train_curve"].get("coherence_scale", {}).items() if scaled else ():
                    c[0].plot(np.arange(1, len(scale) + 1), np.array(scale, dtype=float), color=line.get_color(),
                              label=f"{label(r)} {role}")
            r0 = mine[0]
            a.set(xlabel="training step", ylabel=f"held-out pass@1 ({r0['eval_data']}, {r0['eval_problems']} x "
                  f"{r0['eval_n']}, T={r0['eval_temperature']})",
                  title=f"{claim}: {r0['model']}, {r0['task']}" + (f", {workflow}" if workflow else ""))
            b.set(xlabel="training step", ylabel="entropy (nats/token, running mean 5)", title="per-role entropy")
            a.legend(fontsize=8)
            b.legend(fontsize=6 if len(b.lines) > 8 else 7, ncol=2 if len(b.lines) > 8 else 1)
            if judged:
                c[0].set(xlabel="training step", ylabel="share of the judge's held-out decisions", ylim=(-0.03, 1.03),
                         title="the judge: default picks (Voting); approvals, unparseable (Eval-Opt)")
                c[0].legend(fontsize=7)
            if scaled:
                c[0].set(xlabel="training step", ylabel="gradient scale, 1 - lambda max(0, cos(g, EMA g))",
                         ylim=(-0.03, 1.03), title="I6: the scale applied to the role's gradient (mean of its steps)")
                if c[0].lines:
                    c[0].legend(fontsize=7)
        fig.tight_layout()
        tag = "" if (model, task) == (DEFAULT_MODEL, "math") else f"-{model}-{task}"
        lost = os.path.basename(results) == os.path.basename(LOST)  # its figures never replace the grid's
        path = os.path.join(out_dir, ("lost-" if lost else "") + f"claim-{claim}{tag}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"{path}: {len(runs)} run(s)")


def table(results):
    """The grid table of docs/results.md from the results file, one per (model, task), rows sorted by config and
    seed: base, peak (step), final (step), final - base with its size in standard errors (paired over the problems
    when the record has per-problem counts, marked "paired"; else unpaired: sqrt(se_base^2 + se_final^2)), the two
    se, the mean step time."""
    records = read_jsonl(results)
    out = []
    for model, task in sorted({(r["model"], r.get("task", "math")) for r in records}):
        out += [f"{model}, {task}:", "", "| run | base | peak (step) | final (step) | final - base | se (base / final) "
                "| mean step time |", "|---|---|---|---|---|---|---|"]
        for r in sorted((r for r in records if (r["model"], r.get("task", "math")) == (model, task)),
                        key=lambda r: (list(CONFIGS).index(r["config"]) if r["config"] in CONFIGS else 99, r["seed"])):
            b, p, f = r["base"], r["peak"], r["final"]
            d, se, paired = difference(f, b, r["eval_n"])
            t = f"{r['step_time_s']:.2f} s" if r.get("step_time_s") else "-"
            gain = f"{d:+.3f} ({d / se:.1f} se{', paired' if paired else ''})" if se else f"{d:+.3f}"
            out.append(f"| {label(r)} | {b['pass@1']:.3f} | {p['pass@1']:.3f} ({p['step']}) | {f['pass@1']:.3f} "
                       f"({f['step']}) | {gain} | {b['se']:.3f} / {f['se']:.3f} | {t} |")
        out.append("")
    return "\n".join(out)


def compare(results, a, b, model=DEFAULT_MODEL, task="math"):
    """Two recorded cells of one model and task (names; the last record of each, a cell with none in `results` its
    last lost attempt) side by side at every step both evaluated, and their transfers into the same structures: A,
    B, A - B, its se (paired over the problems when both have per-problem counts; else, or on built-in problems drawn
    by different seeds, unpaired)."""
    ours = lambda r: (r["model"], r.get("task", "math")) == (model, task)
    records = {r["name"]: r for r in read_jsonl(results) if ours(r)}
    # a name with no record: its last attempt in lost.jsonl beside the results file (a cell lost mid-run, as far as
    # it was evaluated), named with where it was lost
    lost = os.path.join(os.path.dirname(os.path.abspath(results)), os.path.basename(LOST))
    if {a, b} - records.keys() and os.path.isfile(lost) and lost != os.path.abspath(results):
        records = {**{r["name"]: r for r in read_jsonl(lost) if ours(r)}, **records}
    if missing := [x for x in (a, b) if x not in records]:
        sys.exit(f"error: --compare: no record named {', '.join(missing)} for {model}, {task} in {results} "
                 f"(--model-name, --task pick another)")
    ra, rb = records[a], records[b]
    a, b = label(ra), label(rb)
    settings = ("eval_data", "eval_problems", "eval_n", "eval_temperature")
    if [ra.get(k) for k in settings] != [rb.get(k) for k in settings]:
        sys.exit(f"error: --compare: {a} and {b} were evaluated with different {'/'.join(settings)}")
    same = ra["eval_data"] != "builtin" or ra["seed"] == rb["seed"]  # built-in held-out problems follow the seed
    pb = {p["step"]: p for p in rb["curve"]}
    pairs = [(f"step {p['step']}", p, pb[p["step"]]) for p in ra["curve"] if p["step"] in pb]
    pairs += [(f"{w} (transfer)", t, rb["transfers"][w]) for w, t in ra.get("transfers", {}).items()
              if w in rb.get("transfers", {})]
    out = [f"| point | {a} | {b} | A - B | se |", "|---|---|---|---|---|"]
    for point, p, q in pairs:
        d, se, paired = difference(p, q, ra["eval_n"], same)
        size, err = (f" ({d / se:.1f} se)", f"{se:.3f}{' paired' if paired else ''}") if se else ("", "-")
        out.append(f"| {point} | {p['pass@1']:.3f} | {q['pass@1']:.3f} | {d:+.3f}{size} | {err} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)  # --grow drops --force by its full name
    p.add_argument("runs_to_do", nargs="*", metavar="NAME", help="CONFIG-sSEED, e.g. single-s0 voting-ip-merged-s1")
    p.add_argument("--gpus", default="0", help="comma list of GPU indices, or cpu")
    p.add_argument("--per-gpu", type=int, default=1, help="runs at once on each GPU")
    p.add_argument("--model", default="/root/mdl/hf", help="train.py --model (default: bench/h200_setup.sh's folder)")
    p.add_argument("--model-name", default=None, help="the model's name in records (default: Qwen2.5-Coder-0.5B-"
                   "Instruct for the default --model, else the folder's name)")
    p.add_argument("--task", choices=list(TASKS), default="math", help="math: the grid as above; code: --task "
                   "code --max-new-tokens 512 on top, MBPP outside task ids 11-510 -> HumanEval (issue 17)")
    p.add_argument("--train-data", default=None, help="'' = built-in problems (default: gsm8k/train.jsonl; "
                   "code: mbpp/mbpp.jsonl, whose test split is left out)")
    p.add_argument("--eval-data", default=None, help="'' = the built-in test split (default: gsm8k/test.jsonl; "
                   "code: humaneval/HumanEval.jsonl)")
    p.add_argument("--eval-problems", type=int, default=500, help="at most this many (the file's first)")
    p.add_argument("--eval-n", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=20, help="checkpoint (= evaluation) cadence in steps")
    p.add_argument("--extra", default="", help="more train.py flags, after the grid's (they win)")
    p.add_argument("--until", type=int, default=None, metavar="STEP", help="train only to STEP (a multiple of "
                   "--eval-every, below the grid's steps), evaluate, write no record; a later call without it "
                   "resumes and finishes the run")
    p.add_argument("--transfer", type=lambda v: [w for w in v.split(",") if w], default=[], metavar="W[,W]",
                   help="a single cell's last adapter also evaluated in every role of these workflows (voting, "
                   "evalopt, orchworkers; eval.py --transfer all, the same held-out problems), into its record (C2)")
    p.add_argument("--grow", type=int, default=0, metavar="STEPS", help="once the runs are recorded (or from "
                   "their record), extend them "
                   "by STEPS more at a time (as --extra \"--steps N\"), each time recorded, until --grow-to: the "
                   "rest of a GPU lease used with no call in between")
    p.add_argument("--grow-to", type=int, default=300, metavar="STEPS")
    p.add_argument("--no-eval-while-training", dest="eval_while_training", action="store_false",
                   help="evaluate only after training (default: evaluate each new checkpoint while training)")
    p.add_argument("--runs", default=os.path.join(ROOT, "runs", "campaign"), help="run folders go here")
    p.add_argument("--logs", default=None, help="log folder (default: RUNS/logs)")
    p.add_argument("--results", default=None, help=f"default {os.path.relpath(RESULTS, ROOT)} (--record-lost: "
                   f"{os.path.relpath(LOST, ROOT)})")
    p.add_argument("--record-lost", metavar="RUN_DIR", help="record a run the GPU machine took with it mid-run, from "
                   "the folder poll brought back (runs.tgz), as far as it was evaluated, marked lost, then exit")
    p.add_argument("--force", action="store_true", help="rerun (from scratch) runs already in --results")
    p.add_argument("--status-every", type=float, default=60)
    p.add_argument("--plot", action="store_true", help="draw one PNG per claim beside --results, then exit")
    p.add_argument("--table", action="store_true", help="print the grid table(s) from --results (Markdown), then exit")
    p.add_argument("--list", action="store_true", help="print the grid and the configurations, then exit")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two recorded cells at every step both evaluated "
                   "(Markdown; paired standard errors where the records allow; a cell with no record: its last "
                   "attempt in lost.jsonl beside the results file), then exit")
    args = p.parse_args(argv)
    args.results = args.results or (LOST if args.record_lost else RESULTS)
    if args.list:
        print("grid:", " ".join(GRID), f"--save-every {args.eval_every}")
        print("\n".join(f"{name:<26}{' '.join(flags)}" for name, flags in CONFIGS.items()))
        return
    if (args.table or args.plot or args.compare) and not os.path.isfile(args.results):
        sys.exit(f"error: --results {args.results}: no such file")
    try:  # a line that is not JSON, a figure's path that cannot be written: one line, not a traceback
        if args.table:
            return print(table(args.results))
        if args.plot:
            return plot(args.results, os.path.dirname(os.path.abspath(args.results)))
    except (OSError, ValueError) as e:
        sys.exit(f"error: {args.results}: {e}")
    if not args.model_name and args.model not in ("/root/mdl/hf", "tiny"):  # records and folders name the model
        sys.exit(f"error: --model {args.model}: give its name too, e.g. --model-name Qwen2.5-Coder-1.5B-Instruct")
    args.model_name = args.model_name or (DEFAULT_MODEL if args.model == "/root/mdl/hf" else args.model)
    if args.compare:
        return print(compare(args.results, *args.compare, args.model_name, args.task))
    if args.record_lost:
        if not all(os.path.isfile(os.path.join(args.record_lost, f)) for f in ("config.json", "eval.jsonl")):
            sys.exit(f"error: --record-lost {args.record_lost}: not a run folder (config.json and eval.jsonl, as "
                     "poll's runs.tgz brings them back)")
        try:
            r = lost_record(args.record_lost, args.model_name, args.eval_data, args.eval_problems, args.eval_n)
        except ValueError as e:
            sys.exit(f"error: --record-lost: {e}")
        save_record(args.results, r)
        return print(f"{r['name']}: lost at step {r['lost']['trained_to']} of {r['lost']['planned_steps']}, recorded to "
                     f"step {r['steps']} (base {r['base']['pass@1']:.3f}, peak {r['peak']['pass@1']:.3f} at "
                     f"{r['peak']['step']}, last {r['final']['pass@1']:.3f}) -> {args.results}")
    args.extra_flags = extra_flags(args.extra)
    if bad := [w for w in args.transfer if w not in STRUCTURES]:
        sys.exit(f"error: --transfer {','.join(bad)}: choose from {','.join(STRUCTURES)}")
    args.logs = args.logs or os.path.join(args.runs, "logs")
    os.makedirs(args.logs, exist_ok=True)
    task_flags, train_default, eval_default = TASKS[args.task]
    args.train_data = train_default if args.train_data is None else args.train_data
    args.eval_data = eval_default if args.eval_data is None else args.eval_data
    done = {key(r): r for r in read_jsonl(args.results)}
    jobs = []
    for name in args.runs_to_do:
        config, seed = parse_name(name)
        d = os.path.join(args.runs, run_name(name, args.task, args.model_name))
        flags = GRID + task_flags + CONFIGS[config] + args.extra_flags
        steps, warmup = (int(flags[len(flags) - flags[::-1].index(f)]) for f in ("--steps", "--warmup"))  # the last wins
        old = None if args.force else done.get((config, seed, args.model_name, args.task))
        if old and args.grow and steps <= old.get("steps", 0) and old["steps"] + args.grow <= args.grow_to:
            steps = old["steps"] + args.grow  # --grow on a recorded cell: from its recorded steps
        if old:  # recorded: skipped, unless more steps are asked for (then as --until's second call: resumed)
            if steps <= old.get("steps", steps):  # a record without its steps (by hand): as many
                print(f"{name}: already in {args.results} ({args.model_name}, {args.task}), skipped (--force reruns "
                      "it; more --steps extends it)")
                continue
            if not (old["steps"] in checkpoint_steps(d) and os.path.exists(os.path.join(d, "config.json"))):
                print(f"{name}: recorded at {old['steps']} steps, but {d} has no step-{old['steps']} checkpoint to "
                      f"extend it to {steps} from: skipped (--force reruns it from scratch)")
                continue
            if args.until is not None and args.until <= old["steps"]:
                sys.exit(print(f"error: --until {args.until}: {name} is recorded at {old['steps']} steps already",
                               file=sys.stderr) or 2)
            print(f"{name}: recorded at {old['steps']} steps: extended to {steps} from its checkpoint; the record "
                  "will be replaced" + ("" if "--no-cosine" in flags else " (the cosine schedule is stretched: "
                                        "not the same as a run trained straight to the new steps)"))
        if args.until is not None and (args.until < 1 or args.until % args.eval_every or args.until >= steps):
            print(f"error: --until {args.until} must be a multiple of --eval-every {args.eval_every} below the "
                  f"run's {steps} steps", file=sys.stderr)
            sys.exit(2)
        if args.until and min(warmup, args.until // 4) != min(warmup, steps // 4):  # train.py's lr_factor
            print(f"note: --until {args.until}: the warm-up is capped at {args.until // 4} steps instead of "
                  f"{min(warmup, steps // 4)}: the resumed run will differ from one trained straight to {steps}")
        if old and min(warmup, old["steps"] // 4) != min(warmup, steps // 4):
            print(f"note: {name} was warmed up over {min(warmup, old['steps'] // 4)} steps, a run of {steps} would be over "
                  f"{min(warmup, steps // 4)}: the extended run differs from one trained straight to {steps}")
        jobs.append({"name": name, "run": os.path.basename(d), "config": config, "seed": seed, "dir": d, "phase": "queued", "steps": steps,
                     "target": args.until or steps, "extended_from": old and old["steps"]})
    for path in filter(None, (args.train_data, args.eval_data) if jobs else ()):
        if not os.path.isfile(os.path.join(ROOT, path)):
            sys.exit(f"error: no such data file: {path} (relative paths are read from {ROOT})")
    if jobs and args.task == "code" and args.train_data:
        args.train_data = mbpp_train(os.path.join(ROOT, args.train_data), args.runs)
    if jobs and args.eval_data:  # a file with fewer problems: all of them (eval.py records how many it took)
        args.eval_problems = min(args.eval_problems, len(load_problems(os.path.join(ROOT, args.eval_data), args.task)))
    todo, lock = queue.Queue(), threading.Lock()
    list(map(todo.put, jobs))

    def worker(gpu):
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            job["gpu"] = gpu
            try:
                run_job(job, gpu, args, lock)
            except Exception as e:  # a bad record must not stop the other runs
                job["phase"] = f"FAILED: {type(e).__name__}: {e}"
    threads = [threading.Thread(target=worker, args=(g,), daemon=True)
               for g in args.gpus.split(",") for _ in range(args.per_gpu)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        end = time.time() + args.status_every
        while time.time() < end and any(t.is_alive() for t in threads):
            time.sleep(0.5)
        stamp = time.strftime("%H:%M:%S")
        for job in jobs:
            if job["phase"] != "queued":
                print(f"[{stamp}] {job['run']:<24} gpu {job.get('gpu', '-')}: {status(job)}", flush=True)
    failed = [job["run"] for job in jobs if job["phase"].startswith("FAILED")]
    stopped = [job["run"] for job in jobs if job["phase"].startswith("stopped")]
    for job in jobs:  # a quick one may have ended before its first status line
        if job["phase"].startswith(("stopped", "FAILED")):
            print(f"{job['name']}: {job['phase']}")
    print(f"campaign: {len(jobs) - len(failed) - len(stopped)} of {len(jobs)} run(s) finished -> {args.results}"
          + (f"; stopped (--until): {', '.join(stopped)}" if stopped else "")
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    if args.grow > 0 and jobs and not failed and not stopped and \
            (more := max(j["steps"] for j in jobs) + args.grow) <= args.grow_to:  # the runs just recorded, extended
        print(f"campaign: --grow {args.grow}: extending to {more} steps", flush=True)
        return main([a for a in (sys.argv[1:] if argv is None else argv) if a != "--force"] +  # once, not per growth
                    ["--extra", f"{args.extra} --steps {more}"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
