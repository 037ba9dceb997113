"""Evaluate base and trained workflows: pass@1 at temperature with its standard error, greedy accuracy,
pass@k, per-role diagnostics and the reward-hacking monitor (share of the most common final answer, share of
rewarded answers that are degenerate, per role); for one configuration, every checkpoint of a run, or across runs.

    python eval.py --model Qwen/Qwen3-0.6B --workflow voting --task math --n 4 --greedy
    python eval.py --model M --workflow evalopt --adapters runs/X/step_000200   # SP or IP, from the files
    python eval.py --model M --workflow voting --adapters runs/single-sp --transfer solvers
    python eval.py --run runs/X [--every 50]    # base (step 0) + checkpoints -> runs/X/eval.jsonl, table
    python eval.py --compare runs/A runs/B      # side by side from their eval.jsonl files (no model)

Episodes come from the same lock-step `workflows.run_workflow` as training. pass@1 is the mean over
problems of (right samples / n); its standard error is over problems (std / sqrt(P)). Every checkpoint
is sampled with the same seed, so checkpoints differ by their weights, not by their random streams.
Adapter maps: base {r: None}, SP {r: "shared"}, IP {r: r}; --transfer all puts a single-agent adapter
on every role, --transfer solvers only on generators and workers (the base model plays the rest).
eval.jsonl holds one line per (checkpoint, settings); a rerun skips what is there, so it resumes (also
after Ctrl-C, which prints one line and exits with 130, the shell's code for it, from the imports on; a last
line cut off by a kill is dropped, with a warning, and its step evaluated again). Bad input, a flag or a
missing or unreadable --run, --model, --data or --adapters, is one line on stderr and exit code 2.
--problems N takes the first N problems, all of a smaller file (nothing is pooled; the result says how many).
Sampling settings (temperature, lengths, rounds, voters) are the run's own under --run, else the defaults.
Left out: maj@k and other voting baselines, per-sample text dumps (train.py writes samples.txt), vLLM.
Plots of a run: python bench/plots.py RUN (matplotlib).
"""
import argparse
import json
import math
import os
import signal
import sys
import textwrap
import time
from collections import Counter

INTERRUPTED = "interrupted (with --run, eval.jsonl keeps the steps finished: a rerun goes on)"
# Ctrl-C while torch and transformers import (seconds): main's one line, not a traceback. A SIGINT that came
# ignored (a background job, nohup) stays ignored, as Python leaves it.
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, lambda *_: sys.exit(print(INTERRUPTED, file=sys.stderr) or 130))
import numpy as np
import torch

import lora
from data import append_jsonl, builtin_problems, load_problems, read_jsonl
from models import TINY, load_default_model
from rewards import final_answer
from train import checkpoints, refuse, run_config
from workflows import ANSWER_ROLES, WORKFLOWS, adapter_map, answer_monitor, fmt, make_policy, mean, run_workflow

EVAL_KEYS = ("n", "temperature", "greedy", "max_new_tokens", "top_p", "max_prompt_tokens", "rounds", "voters",
             "ks", "seed", "chunk")  # settings that evaluate() takes as they are


def pass_at_k(n, c, k):
    """Unbiased pass@k from n samples of which c are right: 1 - C(n-c, k) / C(n, k) (Chen et al., 2021)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 1.0


def load_adapters(model, path, workflow, transfer=None):
    """Load a step folder (or a run directory's last one) into `model` -> (role map, mode): SP if it holds
    shared.safetensors, else IP (a file per role type); with `transfer`, its shared or generator adapter.
    `path` must be a folder: main_single says so for a missing one before it loads the model."""
    path = os.path.join(path, *checkpoints(path)[-1:])  # a run directory: its last step folder
    files = {f[:-12]: os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".safetensors")}
    if transfer:
        names, mode = {"transfer": files.get("shared") or files.get("generator")}, transfer
        if names["transfer"] is None:
            raise ValueError(f"{path}: --transfer needs a single-agent adapter (shared or generator), "
                             f"found {sorted(files)}")
    elif "shared" in files:
        names, mode = {"shared": files["shared"]}, "sp"
    elif missing := [r for r in WORKFLOWS[workflow].roles if r not in files]:
        raise ValueError(f"{path} has no adapter for role(s) {missing} of {workflow} (it has {sorted(files)});"
                         f" --transfer puts a single-agent adapter into another workflow")
    else:
        names, mode = {r: files[r] for r in WORKFLOWS[workflow].roles}, "ip"
    for name, file in names.items():
        if name in lora.adapter_names(model):  # fresh per checkpoint: another run's rank may differ
            lora.delete_adapter(model, name)
        lora.load_adapter(model, name, file)
    return adapter_map(workflow, mode), mode


def evaluate(model, tok, problems, workflow, adapters, task, n=4, temperature=0.7, greedy=False,
             max_new_tokens=512, top_p=1.0, max_prompt_tokens=3072, rounds=None, voters=3, ks=(), seed=0, chunk=32):
    """pass@1 over n samples per problem ± its standard error over problems, right (each problem's count of right
    samples, in order: two checkpoints evaluated on the same problems compare paired), pass@k for k in ks, greedy
    accuracy (one temperature-0 episode per problem) if asked, and diagnostics() of the sampled episodes.
    `chunk` problems run in lock-step at a time (memory)."""
    device, P = next(model.parameters()).device, len(problems)

    def rollouts(group, temp):
        gen = torch.Generator(device=device).manual_seed(seed)
        policy = make_policy(model, tok, adapters, max_new_tokens, temp, top_p, 0, max_prompt_tokens, gen)
        return [ep for i in range(0, P, chunk) for ep in run_workflow(
            workflow, problems[i:i + chunk], group, policy, task, rounds, voters, diagnose=True)]

    episodes = rollouts(n, temperature)
    right = np.array([ep.correct for ep in episodes]).reshape(P, n).sum(1)  # (P,)
    # status: no_box, timeout, ...: counted, not hidden
    return {"problems": P, "n": n, "pass@1": float(np.mean(right / n)), "right": right.tolist(),  # per problem
            "pass@1_se": float(np.std(right / n, ddof=1) / math.sqrt(P)) if P > 1 else 0.0,
            "pass@k": {str(k): float(np.mean([pass_at_k(n, int(c), k) for c in right])) for k in ks},
            "greedy": float(np.mean([ep.correct for ep in rollouts(1, 0.0)])) if greedy else None,
            "status": dict(Counter(ep.status for ep in episodes)), "diagnostics": diagnostics(workflow, episodes, task)}


def diagnostics(workflow, episodes, task="math"):
    """Counts from graded episodes (Turn.correct as workflows.grade_episodes sets it): the reward-hacking
    monitor (answer_top_share, answer_top; per role degenerate_rewarded), per role calls, mean length,
    truncation, answered (the share of calls with a final answer in its form: a solver's or synthesiser's
    \\boxed{} in math or program in code, any other role's \\boxed{}; it tells a role that stops boxing from one that
    stops solving, which `correct` alone cannot) and right rates, then the workflow's own sections
    (WORKFLOWS[workflow].stats)."""
    monitor, degenerate = answer_monitor(episodes, task)  # the reward-hacking monitor, as train.py logs it
    out = {"episodes": len(episodes), "accuracy": mean([ep.correct for ep in episodes]), **monitor, "roles": {}}
    for role in WORKFLOWS[workflow].roles:
        turns = [t for ep in episodes for t in ep.turns if t.role == role]
        form = task if role in (*ANSWER_ROLES, "synthesizer") else "math"  # the others box a verdict, pick or answer
        out["roles"][role] = {"calls": len(turns), "mean_length": mean([len(t.completion_ids) for t in turns]),
                              "truncation_rate": mean([t.finish == "length" for t in turns]),
                              "answered": mean([final_answer(t.text, form) is not None for t in turns]),
                              "correct": mean([t.correct for t in turns if t.correct is not None]),
                              "degenerate_rewarded": degenerate.get(role)}
    return {**out, **WORKFLOWS[workflow].stats(episodes, task)[1]}


# ----------------------------------------------------------------------------- tables

def format_result(r):
    """One evaluation as lines: accuracies, a per-role table, the workflow diagnostics."""
    d = r["diagnostics"]
    lines = [f"pass@1 {r['pass@1']:.3f} ± {r['pass@1_se']:.3f} ({r['problems']} problems x {r['n']} samples)  greedy "
             f"{fmt(r['greedy'])}" + "".join(f"  pass@{k} {v:.3f}" for k, v in r["pass@k"].items()),
             f"most common final answer ({fmt(d.get('answer_top_share'), '.2f')} of those with one): "
             f"{' '.join(str(d.get('answer_top') or '-').split())}",
             f"{'role':<13}{'calls':>7}{'mean len':>10}{'trunc':>8}{'answered':>10}{'right':>8}{'degenerate':>12}"]
    # a row per role; degenerate: share of the role's rewarded answers (older records: -)
    lines += [f"{role:<13}{s['calls']:>7}{fmt(s['mean_length'], '.1f'):>10}{fmt(s['truncation_rate'], '.2f'):>8}"
              f"{fmt(s.get('answered'), '.2f'):>10}{fmt(s['correct'], '.2f'):>8}"
              f"{fmt(s.get('degenerate_rewarded'), '.2f'):>12}" for role, s in d["roles"].items()]
    for part, section in d.items():  # the workflow's own sections (WORKFLOWS[workflow].stats)
        if isinstance(section, dict) and part != "roles":
            text = ", ".join(f"{k} {fmt(v) if v is None or isinstance(v, float) else v}" for k, v in section.items())
            lines.append(textwrap.fill(f"{part}: {text}", 110, subsequent_indent="  "))
    return lines


def summary(records):
    """(base, peak, final) records; the earliest step wins a tie for the peak."""
    by_step = sorted(records, key=lambda r: r["step"])
    return by_step[0], max(by_step, key=lambda r: r["pass@1"]), by_step[-1]


def run_table(run, records):
    r0, s = records[0], records[0]["settings"]
    lines = [f"{run}: {r0['workflow']} / {r0['policy']} / {r0['task']} on {r0['model']}, {r0['problems']} problems "
             f"x {r0['n']} samples, T={s['temperature']}, seed {s['seed']}",
             f"{'step':>6}  {'pass@1 ± se':<15}{'greedy':>7}" + "".join(f"{'pass@' + k:>8}" for k in r0["pass@k"])
             + f"{'top ans':>8}  diagnostics"]  # pass@k: the same ks on every row (one settings)
    # a row per record, ending with the workflow's key facts; top ans: the share of final answers that equal the
    # most common one
    lines += [f"{r['step']:>6}  {r['pass@1']:.3f} ± {r['pass@1_se']:.3f}  {fmt(r['greedy']):>7}"
              + "".join(f"{v:>8.3f}" for v in r["pass@k"].values()) +
              f"{fmt(r['diagnostics'].get('answer_top_share'), '.2f'):>8}  "
              f"{WORKFLOWS[r['workflow']].headline(r['diagnostics'])}".rstrip() for r in records]
    base, peak, final = summary(records)
    lines.append(f"base {base['pass@1']:.3f} | peak {peak['pass@1']:.3f} at step {peak['step']} | final "
                 f"{final['pass@1']:.3f} at step {final['step']} | final - base {final['pass@1'] - base['pass@1']:+.3f}")
    return "\n".join(lines)


def compare_table(runs):
    """One row per (run, settings) from each run's eval.jsonl."""
    lines = [f"{'run':<28}{'workflow':<12}{'policy':<12}{'task':<6}{'model':<18}{'P x n':>9}{'base':>8}"
             f"{'peak (step)':>17}{'final (step)':>17}{'gain':>8}"]
    for run in runs:
        if not (records := read_jsonl(os.path.join(run, "eval.jsonl"))):
            raise FileNotFoundError(f"{run} has no eval.jsonl; first run: python eval.py --run {run}"
                                    if os.path.isdir(run) else f"no such run directory: {run}")
        keys = [json.dumps(r["settings"], sort_keys=True) for r in records]  # one row per settings, first seen first
        for group in ([r for r, k in zip(records, keys) if k == key] for key in dict.fromkeys(keys)):
            (base, peak, final), r = summary(group), group[0]
            lines.append(f"{os.path.basename(os.path.normpath(run))[:27]:<28}{r['workflow']:<12}{r['policy']:<12}"
                         f"{r['task']:<6}{r['model'][-17:]:<18}{str(r['problems']) + ' x ' + str(r['n']):>9}"
                         f"{base['pass@1']:>8.3f}{peak['pass@1']:>10.3f} ({peak['step']:>4})"
                         f"{final['pass@1']:>10.3f} ({final['step']:>4}){final['pass@1'] - base['pass@1']:>+8.3f}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.error = refuse  # one line: argparse's prints the usage first
    # what to evaluate
    which = p.add_mutually_exclusive_group()
    which.add_argument("--run", default=None, help="a training run directory: evaluate base + its checkpoints")
    which.add_argument("--compare", nargs="+", default=None, help="run directories to compare from their eval.jsonl")
    p.add_argument("--every", type=int, default=1, help="--run: every K-th checkpoint step (and always the last)")
    p.add_argument("--model", default=None, help="hub name, folder, .gguf or 'tiny' (default: Qwen3-0.6B, else tiny)")
    p.add_argument("--workflow", choices=list(WORKFLOWS), default=None, help="workflow (default single; --run: the run's)")
    p.add_argument("--task", choices=["math", "code"], default=None, help="default math; --run: the run's")
    p.add_argument("--adapters", default=None, help="a checkpoint folder, or a run directory (its last checkpoint)")
    p.add_argument("--transfer", choices=["all", "solvers"], help="a single-agent adapter on every role, or on solvers")
    p.add_argument("--data", default=None, help="held-out JSONL/JSON (default: a run's eval_data, else built-in)")
    p.add_argument("--problems", type=int, default=None, help="first N problems (a whole file; built-in: 200, tiny 8)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    # sampling (temperature, lengths, rounds, voters: a run's own, else train.py's defaults)
    p.add_argument("--n", type=int, default=4, help="samples per problem for pass@1")
    p.add_argument("--pass-k", default="", help="comma list of k for pass@k, each <= --n, e.g. 2,4")
    p.add_argument("--greedy", action="store_true", help="also one greedy (temperature 0) episode per problem")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the run's, else 0.7)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per role call (default: the run's, else 512)")
    args = p.parse_args(argv)
    try:
        args.ks = [int(k) for k in args.pass_k.split(",") if k.strip()]
    except ValueError:
        p.error(f"--pass-k expects integers separated by commas, got {args.pass_k!r}")
    for name in ("n", "every", "problems", "max_new_tokens"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.temperature is not None and not 0 <= args.temperature < math.inf:
        p.error(f"--temperature must be >= 0 and finite, got {args.temperature}")
    if any(not 1 <= k <= args.n for k in args.ks):
        p.error(f"--pass-k values must be between 1 and --n ({args.n})")
    if args.transfer and not (args.adapters or args.run):
        p.error("--transfer needs --adapters (or --run) holding a single-agent adapter")
    return args


def settings_and_problems(args, config, model, task):
    """Everything that changes the numbers (a record in eval.jsonl is reused only when all match), and the
    held-out problems. seed is fixed, and chunk (problems in lock-step) follows n: 256 episodes at a time, the
    memory of two training batches of 16 x 8; another chunk size would be another random stream."""
    tiny, data = model == TINY, args.data or config.get("eval_data")
    s = {"model": model, "workflow": args.workflow or config.get("workflow", "single"), "transfer": args.transfer,
         "data": data or f"builtin-test-seed{config.get('seed', 0)}",
         "problems": args.problems or (None if data else 8 if tiny else 200), "n": args.n, "ks": args.ks,
         "greedy": args.greedy, "seed": 0, "chunk": max(1, 256 // args.n)}
    for k, default in (("temperature", 0.7), ("top_p", 1.0), ("max_new_tokens", 24 if tiny else 512),
                       ("max_prompt_tokens", 3072), ("rounds", None), ("voters", 3)):  # the flag, else the run's
        s[k] = config.get(k, default) if getattr(args, k, None) is None else getattr(args, k)
    problems = builtin_problems(task, "test", n=s["problems"], seed=config.get("seed", 0)) if not data \
        else load_problems(data, task)[:s["problems"]]
    s["problems"] = len(problems)  # never 0: load_problems and builtin_problems refuse to return none
    return s, problems


def main_run(args):
    """Evaluate step 0 (base) and the checkpoints of args.run with one seed; append to eval.jsonl; table."""
    run, path = args.run, os.path.join(args.run, "eval.jsonl")
    if (config := run_config(run)) is None:  # none, not JSON, or someone else's
        raise FileNotFoundError(f"{run}: not a run directory (no config.json, or not train.py's)" if os.path.isdir(run)
                                else f"no such run directory: {run}")
    if not (steps := [(int(c[5:]), c) for c in checkpoints(run)]):
        raise ValueError(f"{run} has no checkpoints (step_* folders): nothing to evaluate")
    steps = [(0, None)] + [s for s in steps if s[0] % args.every == 0 or s == steps[-1]]
    if args.workflow not in (None, config["workflow"]) and not args.transfer:
        raise ValueError(f"{run} trained {config['workflow']}; evaluating it as {args.workflow} needs --transfer")
    if args.task not in (None, config["task"]):
        raise ValueError(f"{run} trained on {config['task']}, not {args.task}")
    task, name = config["task"], args.model or config["model_used"]
    s, problems = settings_and_problems(args, config, name, task)  # before the model: bad data fails at once
    done = {r["step"] for r in read_jsonl(path, quiet=True) if r["settings"] == s}  # a cut-off line: append_jsonl says so
    if any(step not in done for step, _ in steps):
        model, tok, _ = load_default_model(name, args.device)
    for step, folder in steps:
        if step in done:
            print(f"step {step}: already in {path}, skipped")
            continue
        t0 = time.perf_counter()
        adapters, mode = (adapter_map(s["workflow"], "base"), "base") if folder is None else \
            load_adapters(model, os.path.join(run, folder), s["workflow"], args.transfer)
        r = evaluate(model, tok, problems, s["workflow"], adapters, task, **{k: s[k] for k in EVAL_KEYS})
        append_jsonl(path, {"step": step, "checkpoint": folder or "base", "workflow": s["workflow"],  # whole lines
                            "policy": config["policy"].upper() + (f"->{args.transfer}" if args.transfer else ""),
                            "task": task, "model": name, "settings": s, **r})
        print(f"step {step} ({mode}): pass@1 {r['pass@1']:.3f} ± {r['pass@1_se']:.3f} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    records = sorted((r for r in read_jsonl(path) if r["settings"] == s), key=lambda r: r["step"])
    print(run_table(run, records), f"final checkpoint (step {records[-1]['step']}):", *format_result(records[-1])[1:],
          sep="\n")
    return records


def main_single(args):
    """One configuration: the base model, or --adapters (SP / IP / transfer)."""
    task, workflow = args.task or "math", args.workflow or "single"
    if args.adapters and not os.path.isdir(args.adapters):  # bad paths fail before a model loads
        raise FileNotFoundError(f"no such adapter folder: {args.adapters}")
    if args.data:
        load_problems(args.data, task)
    model, tok, used = load_default_model(args.model, args.device)
    s, problems = settings_and_problems(args, {"workflow": workflow}, used, task)
    adapters, mode = (adapter_map(workflow, "base"), "base") if not args.adapters else \
        load_adapters(model, args.adapters, workflow, args.transfer)
    r = evaluate(model, tok, problems, workflow, adapters, task, **{k: s[k] for k in EVAL_KEYS})
    print(f"{workflow} / {mode}{' ' + args.adapters if args.adapters else ''} / {task} on {used}", *format_result(r), sep="\n")
    return r


def main(argv=None):
    args = parse_args(argv)
    try:  # bad input gets one clear line, not a traceback
        return print(compare_table(args.compare)) if args.compare else main_run(args) if args.run else main_single(args)
    except (OSError, ValueError, RuntimeError) as e:  # exit 2, as for a bad flag: a missing --model, --data, --run...
        refuse(e)
    except KeyboardInterrupt:  # one line, and the shell's code for Ctrl-C (128 + SIGINT), not a usage error's 2
        sys.exit(print(INTERRUPTED, file=sys.stderr) or 130)


if __name__ == "__main__":
    main()
