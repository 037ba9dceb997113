"""Train every role of a multi-agent workflow with GRPO from one 0/1 outcome reward.

    python train.py --workflow evalopt --policy ip                  # the main job
    python train.py --workflow voting --policy ip --parallel-steps merged --out runs/v-merged
    python train.py --out runs/v-merged --resume                    # continue where it stopped
    python train.py --workflow voting --init-adapters peft/generator  # every role from one PEFT adapter

One training step: draw --problems problems, roll each out --group times through the workflow in
lock-step (workflows.py), score the final answers (rewards.py; plus workflows.reward_shaping's term
in the training reward, none by default, never in the logged accuracy), give every turn the GRPO
advantage of its group (problem, instance name), recompute the old log-probs that an adapter's
later steps need, then update.
- SP (shared policy): one LoRA adapter "shared" and one AdamW; one optimizer step over all rows.
- IP (isolated policy): one adapter + AdamW per role type, each stepping only on its own rows.
  Parallel roles (a workflow's `parallel` in workflows.WORKFLOWS: Voting's voters, Orch-Workers'
  workers) take one step per instance (--parallel-steps per-instance, the reference's for Voting; for
  a varying number of workers the reference cuts fixed-size mini-batches instead: minibatch, the role's
  rows in episode order, a step's episode count each) or one step over all instances (merged).
--coherence role=lambda (I6, the reference code's intervention) scales a role's gradient by
1 - lambda * max(0, cos(gradient, its EMA)) before clipping (coherence_scale).
The token weighting of the loss is explicit (--loss-agg, --role-weights) and each role's share of
it is logged, as is everything in metrics.jsonl, with a reward-hacking monitor (the most common
final answer's share, degenerate rewarded answers per role: workflows.answer_monitor). Checkpoints
are written atomically every --save-every steps and at the end; Ctrl-C or SIGTERM finishes the current
step, saves, and exits 130 (Ctrl-C while loading: one line, exit code 130, nothing lost). --resume continues
with the run's own settings (config.json): a flag given with another value is an error, except
--steps, the save / eval / sample cadences and --token-budget; a run stopped before its first
checkpoint starts over. config.json also records where each start came from ("starts": step, command
line, git commit, library versions, GPU). Bad input is one line on stderr and exit code 2, and
nothing is written: a bad flag (found before anything is loaded), a file or folder it names that is
missing or unreadable (--model, --data, --init-adapters, a checkpoint), or --problems above the
data's size (a problem drawn twice in a step would pool its rollouts into one larger GRPO group).

Left out (on purpose): the reference's fixed 512-row mini-batches (a role takes one step per
training step, or one per parallel instance), several PPO epochs, entropy bonus, and any reference
model unless --kl is > 0.

Several GPUs (nanoGPT-style DDP by hand, no framework, its helpers in the last section of train.py; a plain
`python train.py` starts no process group and runs exactly as before):
    torchrun --standalone --nproc_per_node 2 train.py --workflow voting --policy ip ...
Every rank draws the same global batch and rolls out its contiguous slice of the problems (all
rollouts of a problem on one rank, so GRPO groups stay whole), scores them and computes old
log-probs. Each optimizer step then normalises the token weights over the rows of ALL ranks
(step_token_weights), so each rank's loss is its part of the single-process loss; the LoRA
gradients are summed with all_reduce (per role, so the per-role gradient norms logged are global)
and clipped / checked for non-finite values after the reduction, so every rank takes the same step
and the adapters stay identical. Under IP each adapter is reduced on its own, and the ranks first
agree on the set of optimizer steps (one per parallel instance): a rank without rows for a step joins its
all-reduce with a zero gradient. NCCL on CUDA (one GPU per rank, cuda:LOCAL_RANK), gloo on CPU.
Rank 0 logs (metrics over all ranks), evaluates, writes samples and checkpoints. Rank r samples
with its own stream, seeded (seed, r) (rank 0: seed, as a plain run). A checkpoint holds every
rank's RNG state and the global data position, so resuming on the same number of ranks is exact; on
more ranks the new ranks start fresh streams seeded (seed, rank, step), on fewer the extra saved
streams are unused, and either way the problems fall to other ranks than before: the run continues
correctly but does not replay what an uninterrupted run would have sampled.
Left out: overlapping the all-reduce with backward (DDP buckets), sharded models (each rank holds
the whole model), splitting evaluation across ranks, balancing ranks by episode length, and Ctrl-C /
SIGTERM saving under torchrun (it stops at once; resume from the last --save-every checkpoint). A problem
drawn twice into one batch (at an epoch boundary) pools into one GRPO group in one process but
forms two groups when its copies land on different ranks.
"""
import argparse
import fcntl
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

# Ctrl-C until ctrl_c_finishes_the_step (torch importing, the model loading): one line and exit 130, not a traceback.
# A SIGINT that came ignored (a background job, nohup) stays ignored, as Python leaves it.
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, lambda *_: sys.exit(print("interrupted while loading; nothing lost", file=sys.stderr) or 130))
import numpy as np
import torch
import torch.distributed as dist
import transformers
from tqdm import tqdm

import grpo
import lora
from data import append_jsonl, builtin_problems, load_problems
from models import TINY, load_default_model
from workflows import WORKFLOWS, adapter_map, answer_monitor, grade_episodes, make_policy, mean, run_workflow

# Defaults that depend on the model: (real model, tiny smoke run). The tiny model learns nothing,
# so its run only has to exercise every code path quickly on a 2-core CPU.
SIZED = {"steps": (200, 6), "problems": (16, 4), "group": (8, 4), "max_new_tokens": (512, 24)}
# Flags that --resume may change: how long, how often to save / evaluate / sample, and the micro-batch
# size (the gradient does not depend on it, tests/test_train.py). --steps also stretches the cosine.
RESUMABLE = ("steps", "save_every", "eval_every", "eval_problems", "sample_every", "token_budget")


# ---------------------------------------------------------------------------------------------
# the run, top-down: main -> run -> train_step -> optimizer_step -> role_backward. It reads as one process:
# what several processes (torchrun) add is in the last section, reached through world(), gather() and a
# few named hooks (my_share, step_token_weights, sum_over_ranks, whole_batch, seed_streams, ...).

def main(argv=None):
    args = parse_args(argv)
    owner = "RANK" in os.environ and not dist.is_initialized()  # torchrun started us: run() joins the group
    try:
        return run(args)
    finally:
        if owner and dist.is_initialized():
            dist.destroy_process_group()
        if getattr(args, "lock", None) is not None:  # the run folder's (load): a later main in this process may take it
            os.close(args.lock)


def run(args):
    """main after the command line: load, set up or resume, train, save. Under torchrun every rank
    runs this; rank 0 alone prints, writes the run folder and evaluates."""
    problems, eval_set, model, tok, adapters, optimizers = load(args)
    gen = seed_streams(torch.Generator(device=next(model.parameters()).device), args.seed)  # the sampler's
    start, consumed = load_checkpoint(args, model, adapters, optimizers, gen) if args.resume else (0, 0)
    if start >= args.steps:
        if world()[0] == 0:
            print(f"{args.out} is already finished: step {start} of {args.steps}. Pass a larger --steps to train further.")
        return args.out
    broadcast_adapters(model, adapters)  # torchrun: every rank starts from rank 0's weights
    record_start(args, start, gen.device, adapters, len(problems))
    bad_in_a_row = 0
    with ctrl_c_finishes_the_step(world()[1] == 1) as stop:
        for step in (bar := tqdm(range(start, args.steps), initial=start, total=args.steps, desc="train",
                                 dynamic_ncols=True, disable=world()[0] != 0)):
            batch = my_share(draw_problems(problems, consumed, args.problems, args.seed))  # the data position is global
            consumed += args.problems
            for g in [g for opt in optimizers.values() for g in opt.param_groups]:
                g["lr"] = args.lr * lr_factor(step, args)
            metrics, episodes = train_step(model, tok, batch, args, optimizers, gen, step + 1)
            if world()[0] == 0:
                if eval_set and (step + 1) % args.eval_every == 0:
                    metrics["eval_accuracy"] = held_out_accuracy(model, tok, eval_set, args)
                append_jsonl(os.path.join(args.out, "metrics.jsonl"), metrics, new=step == 0)  # step 0: starts over
                if args.sample_every and (step + 1) % args.sample_every == 0 or step == 0:
                    write_sample(args.out, step + 1, episodes[0], tok)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", skipped=metrics["skipped_steps"])
            bad_in_a_row = bad_in_a_row + 1 if metrics["skipped_steps"] else 0
            if step + 1 == args.steps or stop["requested"] or bad_in_a_row >= 3 or (step + 1) % args.save_every == 0:
                save_checkpoint(args, step + 1, model, adapters, optimizers, gen, consumed)
            if bad_in_a_row >= 3:
                sys.exit(f"error: non-finite loss or gradient in {bad_in_a_row} steps in a row; stopped at step "
                         f"{step + 1} (checkpoint saved). Try a lower --lr.")
            if stop["requested"]:  # exit 130: a script can tell it from a finished run
                sys.exit(print(f"stopped at step {step + 1}; continue with: python train.py --out {args.out} --resume") or 130)
    gather(None)  # a barrier: no rank returns before rank 0 has written the last checkpoint
    if world()[0] == 0:
        print(f"done: {args.out} (metrics.jsonl, config.json, {len(checkpoints(args.out))} checkpoint(s))")
    return args.out


def train_step(model, tok, problems, args, optimizers, gen, step):
    """Rollouts -> rewards -> advantages -> old log-probs -> updates. Returns (metrics, episodes)."""
    t0, policy = time.perf_counter(), policy_for(model, tok, args, gen)
    episodes = run_workflow(args.workflow, problems, args.group, policy, args.task, args.rounds, args.voters, grade=False)
    t_rollout = time.perf_counter()
    grade_episodes(episodes, problems, args.group)
    rows = [t for ep in episodes for t in ep.turns]  # a row per turn, in episode order
    keys = [(ep.problem_id, t.instance) for ep in episodes for t in ep.turns]  # the GRPO group of each row
    # the k-th turn of its role in its episode: which parallel instance (voter, worker) a row is
    instance_index = [sum(u.role == t.role for u in ep.turns[:k]) for ep in episodes for k, t in enumerate(ep.turns)]
    if args.parallel_steps == "minibatch":  # the reference's cut: a role's rows in order, a step's episodes each
        rank, counts = world()[0], gather((len(episodes), Counter(r.role for r in rows)))  # ranks: problems in order
        start = {role: sum(c[role] for _, c in counts[:rank]) for role in WORKFLOWS[args.workflow].roles}
        order = {role: iter(range(s, s + len(rows))) for role, s in start.items()}  # places in the batch
        instance_index = [next(order[r.role]) // sum(e for e, _ in counts) for r in rows]
    groups, t1 = update_groups(rows, instance_index, args), time.perf_counter()  # torchrun: waits for every rank
    adv, singletons = grpo.group_advantages(keys, [r.reward for r in rows], scale=not args.adv_mean_only)
    (old_lp, ref_lp), t2 = old_and_ref_logprobs(model, rows, adv, groups, args), time.perf_counter()
    # by_adapter: update seconds per adapter
    stats, skipped, by_adapter = {role: role_stats() for role in WORKFLOWS[args.workflow].roles}, 0, Counter()
    for adapter, idx in groups:  # update_groups names the adapter: "shared" under SP, the role under IP
        pick, start = lambda xs: [xs[i] for i in idx], time.perf_counter()
        skipped += not optimizer_step(model, adapter, pick(rows), pick(adv), pick(old_lp), pick(ref_lp),
                                      optimizers[adapter], args, stats)
        by_adapter[adapter] += time.perf_counter() - start
    t3 = time.perf_counter()
    episodes, rows, adv, singletons = whole_batch(episodes, adv, singletons, stats)  # torchrun: every rank's
    monitor, degenerate = answer_monitor(episodes, args.task)
    # reward_mean: the training reward (outcome + workflows.reward_shaping); accuracy: the 0/1 outcome alone
    metrics = {"step": step, "reward_mean": float(np.mean([ep.reward + ep.shaping for ep in episodes])),
               "accuracy": float(np.mean([ep.correct for ep in episodes])),
               "episodes": len(episodes), "rows": len(rows), "singleton_groups": singletons,
               "zero_advantage_rows": sum(a == 0 for a in adv), "optimizer_steps": len(groups),
               "skipped_steps": skipped, "grade_status": dict(Counter(ep.status for ep in episodes)),
               "lr": next(iter(optimizers.values())).param_groups[0]["lr"],
               "roles": {role: role_metrics([r for r in rows if r.role == role], s, degenerate.get(role))
                         for role, s in stats.items() if any(r.role == role for r in rows)},
               **monitor, "workflow": WORKFLOWS[args.workflow].stats(episodes, args.task)[0],
               "time": {"rollout": t_rollout - t0, "reward": t1 - t_rollout, "old_logprobs": t2 - t1,
                        "update": t3 - t2, "total": t3 - t0, "ranks": world()[1],  # times are rank 0's
                        "update_by_adapter": dict(by_adapter), "stages": getattr(policy, "stages", None),  # make_policy's
                        "rollout_tokens_per_s": sum(len(r.completion_ids) for r in rows) / max(t_rollout - t0, 1e-9)}}
    return metrics, episodes


def policy_for(model, tok, args, gen):
    return make_policy(model, tok, adapter_map(args.workflow, args.policy), max_new_tokens=args.max_new_tokens,
                       temperature=args.temperature, top_p=args.top_p,
                       max_prompt_tokens=args.max_prompt_tokens, generator=gen)


def update_groups(rows, instance_index, args):
    """(adapter, row indices) per optimizer step, in order. IP updates roles in the workflow's order; the
    order does not matter because each adapter only changes its own rows' log-probs, and the old
    log-probs of an adapter with several steps are computed before its first. Under torchrun the
    steps are those of the whole batch (the union over ranks), so a rank with no rows for a step
    (e.g. no episode with a third worker) still takes part in it, with an empty list."""
    live = [i for i, r in enumerate(rows) if r.completion_ids]
    if args.policy == "sp":
        return [("shared", live)]
    workflow = WORKFLOWS[args.workflow]
    per_instance = lambda role: args.parallel_steps != "merged" and role in workflow.parallel
    # (role, instance index), -1: every instance of the role in one step
    steps = {(rows[i].role, instance_index[i] if per_instance(rows[i].role) else -1) for i in live}
    steps = sorted(set().union(*gather(steps)), key=lambda k: (workflow.roles.index(k[0]), k[1]))
    return [(role, [i for i in live if rows[i].role == role and k in (-1, instance_index[i])]) for role, k in steps]


def old_and_ref_logprobs(model, rows, adv, groups, args):
    """The log-probs that optimizer_step cannot take from its own forward -> (old_lp, ref_lp), per row a
    (completion length,) tensor or None: old ones for the rows of an adapter's later optimizer steps,
    and the base model's (adapter off) for rows of a role with a KL term.

    Old log-probs are not taken from the sampler: its come from another kernel path (KV cache,
    padding, batch shape, bf16 on GPU), while the ratio must be exactly 1 before the first update.
    An adapter's first optimizer step uses its own forward's detached log-probs (optimizer_step: ratio
    exactly 1, no extra pass; with --lora-dropout also under the same dropout mask). Only the rows of its
    later steps (per-instance parallel roles) get them recomputed here, before any step, since those
    steps see a policy changed by the earlier ones. This pass runs in eval mode, without dropout: the
    policy that sampled (the later steps' ratio then also carries the update's dropout noise)."""
    role_adapter = adapter_map(args.workflow, args.policy)  # "shared" under SP, the role's own under IP
    later = {i for k, (adapter, idx) in enumerate(groups) if adapter in [a for a, _ in groups[:k]] for i in idx
             if adv[i] != 0 or role_value(args.kl_coefs, rows[i].role)}  # the rows optimizer_step runs
    old_lp, ref_lp = {}, {}  # row index -> log-probs; the rows not computed get None
    with torch.no_grad():
        for adapter in dict.fromkeys(role_adapter.values()):
            mine = [i for i, r in enumerate(rows) if role_adapter[r.role] == adapter and r.completion_ids]
            for target, name, sel in [(old_lp, adapter, [i for i in mine if i in later]),
                                      (ref_lp, None, [i for i in mine if role_value(args.kl_coefs, rows[i].role)])]:
                for mb in grpo.micro_batches([len(rows[i].prompt_ids) + len(rows[i].completion_ids) for i in sel],
                                             args.token_budget):  # of the selected rows only: full, fewer passes
                    ix = [sel[j] for j in mb]
                    lora.set_adapter(model, name)  # in the loop: a selection with no rows sets nothing
                    target.update(zip(ix, row_logprobs(model, [rows[i] for i in ix], args.temperature)[0]))
    return [old_lp.get(i) for i in range(len(rows))], [ref_lp.get(i) for i in range(len(rows))]


def optimizer_step(model, adapter, rows, adv, old_lp, ref_lp, opt, args, stats):
    """One AdamW step of `adapter` on `rows` (Turns) with their advantages, old and reference
    log-probs (parallel lists; an old entry of None: the row's own detached log-probs, ratio 1, as
    it is for every row of an adapter's only step in a batch). The loss is run role by role
    (role_backward) so that each role's part of the gradient can be measured. Returns False, leaving
    the adapter unchanged, when the loss or the gradient is not finite."""
    weights, shares = step_token_weights([r.role for r in rows], [len(r.completion_ids) for r in rows], args)
    params = lora.adapter_parameters(model, adapter)
    lora.set_adapter(model, adapter)
    model.train()
    for p in params:  # zeros, not None: where no row runs, AdamW still moves its moments, as a full pass would
        p.grad = torch.zeros_like(p)
    finite, role_grads, before = True, {}, 0
    for role in sorted(shares):  # the roles of the whole step (under torchrun: every rank walks the same ones)
        kl_coef = role_value(args.kl_coefs, role)
        # a row with advantage 0 and no KL term adds exactly 0 to the loss and the gradient: it is not run
        # (its weight still counts in `weights`); the role's entropy, clip, kl and gap sums cover the rest
        idx = [i for i, r in enumerate(rows) if r.role == role and (adv[i] != 0 or kl_coef)]
        pick = lambda xs: [xs[i] for i in idx]
        stats[role]["weight_share"].append(shares[role])
        stats[role]["rows_run"].append(len(idx))
        finite &= role_backward(model, *map(pick, (rows, adv, old_lp, ref_lp, weights)), kl_coef, args, stats[role])
        grads = torch.cat([p.grad.flatten() for p in params])
        role_grads[role], before = grads - before, grads  # this role's part of the gradient
    finite = sum_over_ranks(params, role_grads, finite)  # torchrun: every rank now holds the whole batch's gradient
    for role, grad in role_grads.items():
        stats[role]["grad_norms"].append(float(grad.norm()))
        if finite and (lam := role_value(args.coherence_map, role)) and grad.isfinite().all() and grad.any():
            scale = coherence_scale(opt.state, role, grad, lam, args.coherence_window, stats[role])  # I6
            for p, g in zip(params, grad.split([p.numel() for p in params])):
                p.grad.add_(g.view_as(p), alpha=scale - 1)  # the role's part times scale, the other roles' as they were
    norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
    model.eval()
    if not (finite and torch.isfinite(norm)):
        opt.zero_grad(set_to_none=True)
        return False
    opt.step()
    for role in shares:
        stats[role]["optimizer_steps"] += 1
    return True


def coherence_scale(state, role, grad, lam, window, s):
    """I6, the reference code's coherence regularizer: 1 - lam * clamp(cos(grad, EMA), 0, 1) for the role's
    gradient (one cosine over all its LoRA parameters), then the EMA (tau = 1 - 1/window, from zeros: the
    first step has cos 0, scale 1) moves with the scaled gradient. The EMA lives in the adapter's optimizer
    state (key "coherence/ROLE"), so checkpoints and --resume carry it. Logs cos and scale in `s`. Called per
    optimizer step with a finite, non-zero gradient: per-instance voters or workers each meet the EMA that
    the earlier instances of the same training step already moved."""
    ema = state[key].to(grad.device) if (key := f"coherence/{role}") in state else torch.zeros_like(grad)
    cos = float(torch.nn.functional.cosine_similarity(grad, ema, dim=0))
    s["coherence"].append((cos, scale := 1.0 - lam * min(max(cos, 0.0), 1.0)))
    state[key] = (1 - 1 / window) * ema + (1 / window) * scale * grad  # tau = 1 - 1/window
    return scale


def role_backward(model, rows, adv, old_lp, ref_lp, weights, kl_coef, args, s):
    """backward() of one role's part of an optimizer step's loss (lists as optimizer_step's, `weights` per
    token, normalised over the whole step), in micro-batches of at most --token-budget padded tokens;
    adds to the role's sums `s` (role_stats). Returns whether the loss was finite."""
    s["losses"].append(0.0)
    finite = True
    for mb in grpo.micro_batches([len(r.completion_ids) + len(r.prompt_ids) for r in rows], args.token_budget):
        lps, ents = row_logprobs(model, [rows[i] for i in mb], args.temperature)
        lp = torch.cat(lps)
        # the old log-probs: a None entry (an adapter's first step, train_step) takes this forward's own
        old = lp.detach() if old_lp[mb[0]] is None else torch.cat([old_lp[i] for i in mb])
        per_token = lambda vals: torch.cat([torch.full_like(row_lp, v) for row_lp, v in zip(lps, vals)])
        ref = torch.cat([ref_lp[i] for i in mb]) if ref_lp[mb[0]] is not None else None
        loss_t, clipped, kl = grpo.token_loss(lp, old, per_token([adv[i] for i in mb]), args.clip_low, args.clip_high,
                                              args.dual_clip, ref, per_token([kl_coef] * len(mb)))
        loss = (per_token([weights[i] for i in mb]) * loss_t).sum()
        finite &= bool(torch.isfinite(loss))
        loss.backward()
        s["losses"][-1] += loss.item()
        # the off-policy gap: the sampler's log-probs (another kernel path, bf16, merged adapter) vs the old ones
        gap = (old - torch.tensor([x for i in mb for x in rows[i].logprobs], device=lp.device)).abs()
        for key, x in (("gap_sum", gap), ("entropy_sum", torch.cat(ents)), ("clipped", clipped), ("kl_sum", kl)):
            s[key] += x.sum().item()
        s["train_tokens"] += lp.numel()
    return finite


def row_logprobs(model, rows, temperature):
    """grpo.completion_logprobs of `rows` (Turns) at the sampling temperature -> (log-probs, entropies)."""
    return grpo.completion_logprobs(model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows], temperature)


def role_stats():
    """A role's update sums in one training step; losses and grad_norms hold one entry per optimizer step."""
    return dict(weight_share=[], losses=[], grad_norms=[], entropy_sum=0.0, clipped=0, kl_sum=0.0, gap_sum=0.0,
                train_tokens=0, optimizer_steps=0, coherence=[], rows_run=[])


def role_metrics(rows, s, degenerate):
    """metrics["roles"][role] from the role's rows (Turns) of the step and its update sums (role_stats)."""
    tokens = sum(len(r.completion_ids) for r in rows)
    return {"rows": len(rows), "tokens": tokens, "mean_length": tokens / len(rows),
            "truncation_rate": sum(r.finish == "length" for r in rows) / len(rows),
            # share of the loss weight within the optimizer steps it took part in (mean over them)
            "weight_share": float(np.mean(s["weight_share"])) if s["weight_share"] else 0.0,
            # per optimizer step of the role: a sum would grow with the number of steps (per-instance voters)
            "grad_norm": mean(s["grad_norms"]), "grad_norm_max": max(s["grad_norms"], default=None),
            "loss": mean(s["losses"]), "degenerate_rewarded": degenerate,
            # per token of the rows the update ran (advantage != 0 or a KL term); None when it ran none
            **{name: s[key] / s["train_tokens"] if s["train_tokens"] else None for name, key in (
               ("entropy", "entropy_sum"), ("clip_fraction", "clipped"), ("kl", "kl_sum"), ("logprob_gap", "gap_sum"))},
            "rows_run": s["rows_run"], "grad_norms": s["grad_norms"],  # per optimizer step, in order (C5: per instance)
            "optimizer_steps": s["optimizer_steps"],  # I6 (--coherence): mean cos(g, EMA) and gradient scale
            **dict(zip(("coherence_cos", "coherence_scale"), map(mean, zip(*s["coherence"])))),  # none without I6
            "diag_correct": mean([r.correct for r in rows if r.correct is not None])}


def held_out_accuracy(model, tok, problems, args):
    """Held-out accuracy (1 sample per problem) for --eval-every. Its own generator with a fixed
    seed: every evaluation draws the same random stream, and training's stream is left untouched,
    so the eval cadence never changes what training samples. eval.py does the full evaluation."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(args.seed + 10_000)
    episodes = run_workflow(args.workflow, problems, 1, policy_for(model, tok, args, gen), args.task, args.rounds, args.voters)
    return float(np.mean([ep.correct for ep in episodes]))


# ---------------------------------------------------------------------------------------------
# setting a run up: model and problems, adapters, config.json; the data order, the lr

def load(args):
    """The problems (training, held-out), the model, the flags sized by it (SIZED), the run folder, then the
    LoRA adapters ("shared" under SP, one per role type under IP; from --init-adapters if given) and an AdamW
    for each -> (problems, eval_set, model, tok, adapter names, {name: optimizer}); bad input in one line and
    exit code 2 (refuse), not a traceback."""
    device = rank_device(args.device)  # torchrun on GPUs: this rank's own
    try:
        problems = load_problems(args.data, args.task) if args.data else builtin_problems(args.task, "train", seed=args.seed)
        # --eval-data is checked even unused here (eval.py --run reads it later)
        eval_set = (load_problems(args.eval_data, args.task) if args.eval_data else builtin_problems(
            args.task, "test", seed=args.seed) if args.eval_every else [])[:args.eval_problems if args.eval_every else 0]
        model, tok, args.model_used = load_default_model(args.model, device)
        grpo.check_logits(model)  # log-probs as the sampler's; refuses unknown logit post-processing
        torch.manual_seed(args.seed)  # the same on every rank: the adapters start equal
        adapters = ["shared"] if args.policy == "sp" else list(WORKFLOWS[args.workflow].roles)
        for name in adapters:
            lora.add_adapter(model, name, rank=args.lora_rank, alpha=args.lora_alpha, dropout=args.lora_dropout,
                             targets=args.lora_targets.split(",") if args.lora_targets else None)
            if not args.resume and args.init_adapters:  # a warm start (a resume loads its checkpoint instead)
                one = os.path.isfile(os.path.join(args.init_adapters, "adapter_config.json"))  # DIR is one PEFT folder
                lora.load_adapter(model, name, args.init_adapters if one else os.path.join(args.init_adapters, name))
    except (OSError, ValueError, RuntimeError) as e:  # also --lora-targets naming no layer, a missing or malformed
        refuse(e)  # --init-adapters, a model file cut off (models.load_model)
    # Join the process group only now: once one exists, transformers' save_pretrained writes on rank
    # 0 alone, which would leave the tiny model (built through save_pretrained) unwritten elsewhere.
    init_distributed(device)
    vars(args).update({name: small if args.model_used == TINY else real for name, (real, small) in SIZED.items()
                       if getattr(args, name) is None})  # the flags left unset (None)
    if not world()[1] <= args.problems <= len(problems):  # more than the data: a problem's repeats would pool in one group
        refuse(f"--problems {args.problems}: the data has {len(problems)} problems" if args.problems > len(problems) else
               f"--problems {args.problems} would leave ranks without problems; use at least {world()[1]}")
    default_out = os.path.join("runs", f"{args.workflow}-{args.policy}-{args.task}-{time.strftime('%Y%m%d-%H%M%S')}")
    args.out = gather(args.out or default_out)[0]  # rank 0's: the ranks' clocks may straddle a second
    try:
        os.makedirs(args.out, exist_ok=True)
        # rank 0 locks the folder until main ends (before anything is written): two runs in one would mix their files
        args.lock = os.open(args.out, os.O_RDONLY) if world()[0] == 0 else None
        if args.lock is not None:
            fcntl.flock(args.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:  # a file on the way, no permission, the lock held
        refuse(f"--out {args.out}: " + ("another train.py is running in it" if isinstance(e, BlockingIOError) else e.strerror))
    if args.policy == "ip" and (args.role_weights or args.loss_agg == "role-balanced") and world()[0] == 0:
        print("note: under IP --role-weights and role-balanced do not change the update (a step holds one role)", flush=True)
    return problems, eval_set, model, tok, adapters, {name: torch.optim.AdamW(
        lora.adapter_parameters(model, name), lr=args.lr, weight_decay=args.weight_decay) for name in adapters}


def record_start(args, start, device, adapters, n_problems):
    """Where this start came from, after a resumed run's earlier ones (code, command line, versions,
    hardware), into args.starts; config.json written and the run announced (rank 0)."""
    args.starts = (getattr(args, "starts", []) if args.resume else []) + [{"step": start, "command": args.command,
        "commit": git_commit(), "python": sys.version.split()[0], "torch": torch.__version__, "ranks": world()[1],
        "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}]
    config = {k: v for k, v in vars(args).items() if k not in ("kl_coefs", "role_weight_map", "coherence_map", "command", "lock")}
    if world()[0] == 0:
        if start == 0 and os.path.exists(os.path.join(args.out, "config.json")):  # metrics, samples: "w" at step 0
            print(f"note: {args.out} stopped before its first checkpoint: starting it over from step 0", flush=True)
        Path(tmp := os.path.join(args.out, "config.json.tmp")).write_text(json.dumps(config, indent=1))
        os.replace(tmp, os.path.join(args.out, "config.json"))  # a kill mid-write leaves the old one whole
        print(f"run {args.out}: {args.workflow} / {args.policy.upper()} / {args.task} on {args.model_used} ({device}"
              f"{f' x {world()[1]} ranks' if world()[1] > 1 else ''}), {n_problems} training problems, "
              f"adapters {adapters}", flush=True)
        if args.steps // 4 < args.warmup:  # lr_factor
            print(f"note: --warmup {args.warmup} capped at {args.steps // 4} steps, a quarter of --steps "
                  f"{args.steps}, so that the run reaches --lr {args.lr}", flush=True)


@contextmanager
def ctrl_c_finishes_the_step(active):
    """Yields {"requested": False}; while `active`, the first Ctrl-C or SIGTERM (kill, timeout, a job scheduler)
    sets it (run finishes the step, saves and exits 130) and a second aborts unsaved (one line, exit 130). Under
    torchrun (not active) both interrupt at once: a flag seen by some ranks and not others would leave the rest
    waiting in a collective. The handler it replaces is the script's for loading (top of the file); Python's own
    are left after it, as before a run."""
    stop = {"requested": False}

    def on_signal(signum, frame):
        if stop["requested"]:  # one line, not a traceback; exit 130 as for Ctrl-C
            sys.exit(print("\nCtrl-C/SIGTERM again: stopped unsaved; --resume continues from the last checkpoint", file=sys.stderr) or 130)
        stop["requested"] = True
        print("\nCtrl-C/SIGTERM: finishing this step, then saving a checkpoint (a second one aborts unsaved)", flush=True)
    signal.signal(signal.SIGINT, on_signal if active else signal.default_int_handler)  # torchrun: KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal if active else signal.SIG_DFL)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def draw_problems(problems, consumed, count, seed):
    """Problems consumed..consumed+count of an endless stream of seeded per-epoch permutations, so
    the data position is one integer and resuming needs no RNG state."""
    n, first = len(problems), consumed // len(problems)
    stream = np.concatenate([np.random.default_rng([seed, epoch]).permutation(n)  # the epochs touched, in a row
                             for epoch in range(first, (consumed + count - 1) // n + 1)])
    return [problems[i] for i in stream[consumed - first * n:][:count]]


def lr_factor(step, args):
    """Linear warm-up, then cosine decay to 0 at --steps (or constant). The warm-up is --warmup steps capped
    at a quarter of --steps: a longer one never reaches --lr (every tiny run had 15 of 6 steps), while the
    cap leaves the reference's 15 of 200 and results.md's 3 of 24 as they are."""
    warmup = min(args.warmup, args.steps // 4)
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, args.steps - warmup)
    return 1.0 if args.no_cosine else 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


# ---------------------------------------------------------------------------------------------
# the run folder: checkpoints, samples, provenance

def checkpoints(out):
    return sorted(d for d in os.listdir(out) if d.startswith("step_") and not d.endswith(".tmp")) \
        if os.path.isdir(out) else []


def save_checkpoint(args, step, model, adapters, optimizers, gen, consumed):
    """Everything needed to continue exactly: adapters (safetensors), optimizer states, RNG states,
    data position (the learning rate is a function of the step). Written to a temporary folder, then
    renamed (atomic). Under torchrun every rank calls this (to hand over its RNG states) and rank 0
    writes: adapters and optimizer states are the same on every rank."""
    # this rank's RNG states: CPU torch, the sampler's generator, and its own GPU's (current device)
    rngs = gather({"torch": torch.get_rng_state(), "sampler": gen.get_state(),
                   "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None})
    if world()[0] != 0:
        return
    final = os.path.join(args.out, f"step_{step:06d}")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in adapters:
        lora.save_adapter(model, name, os.path.join(tmp, f"{name}.safetensors"),
                          {"step": str(step), "model": args.model_used, "workflow": args.workflow})
    # rng: rank 0's (a plain run's) RNG states, rng_ranks: the other ranks'
    torch.save({"step": step, "consumed": consumed, "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
                "rng": rngs[0], "rng_ranks": rngs[1:]}, os.path.join(tmp, "state.pt"))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def load_checkpoint(args, model, adapters, optimizers, gen):
    """--resume: restore the last checkpoint of args.out on this rank -> (step, data position); one that
    cannot be restored ends the run as a bad flag does (one line, exit 2). Rank r takes the saved RNG states
    of rank r; a rank the saved run did not have starts a fresh sampling stream seeded (seed, rank, step)."""
    rank, n = world()
    folder = os.path.join(args.out, checkpoints(args.out)[-1])
    try:
        state = torch.load(os.path.join(folder, "state.pt"), weights_only=False, map_location="cpu")
        for name in adapters:  # each adapter and its optimizer (load made one per adapter)
            lora.load_adapter(model, name, os.path.join(folder, f"{name}.safetensors"))
            optimizers[name].load_state_dict(state["optimizers"][name])
        saved = [state["rng"], *state.get("rng_ranks", [])]
        if rank < len(saved):
            torch.set_rng_state(saved[rank]["torch"])
            gen.set_state(saved[rank]["sampler"])
            # the CUDA state is a list when saved by an older train.py (all GPUs)
            if (cuda := saved[rank]["cuda"]) is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(cuda) if isinstance(cuda, list) else torch.cuda.set_rng_state(cuda)
        else:  # a rank the saved run did not have
            seed_streams(gen, args.seed, state["step"])
        # rank 0: metrics and samples logged after the checkpoint (steps it did not save) are dropped: redone.
        # An entry is a line of metrics.jsonl, or a block of samples.txt starting with "=== step N ". A last
        # line cut off by a kill (no newline) is dropped first. The file is read whole before it is rewritten.
        for name, entry_start, step_of in (("metrics.jsonl", r"(?m)^", lambda e: json.loads(e)["step"]),
                                           ("samples.txt", r"(?m)^(?==== step \d+ )", lambda e: int(e.split()[2]))):
            if rank == 0 and os.path.exists(path := os.path.join(args.out, name)):
                append_jsonl(path)  # with a warning naming the file
                kept = [e for e in re.split(entry_start, Path(path).read_text()) if e.strip() and step_of(e) <= state["step"]]
                Path(path + ".tmp").write_text("".join(kept))
                os.replace(path + ".tmp", path)  # a kill mid-write (a resume's first second) leaves the old one whole
    except Exception as e:  # a truncated or foreign file (safetensors, pickle, shapes, keys)
        refuse(f"--resume: cannot restore {folder} ({type(e).__name__}: {' '.join(str(e).split()).split('. ')[0]})")
    streams = "RNG states" if n == len(saved) else f"RNG states (saved on {len(saved)} rank(s), now " \
        f"{n}" + (f": ranks {len(saved)}+ start fresh streams)" if n > len(saved) else ")")
    if rank == 0:
        print(f"resumed from {folder}: step {state['step']}, adapters {list(adapters)}, optimizer "
              f"states, {streams}, data position {state['consumed']}", flush=True)
    return state["step"], state["consumed"]


def write_sample(out, step, episode, tok):
    """Append one episode to samples.txt: per turn its prompt on one line (whitespace collapsed, the
    middle of a long one elided; empty under torchrun, whose gathered turns keep no prompt ids) and
    its completion as sampled."""
    with open(os.path.join(out, "samples.txt"), "a" if step > 1 else "w") as f:
        f.write(f"=== step {step} problem {episode.problem_id} rollout {episode.rollout} "
                f"reward {episode.reward} ({episode.status})\n")
        for t in episode.turns:
            prompt = " ".join(tok.decode(t.prompt_ids, skip_special_tokens=True).split())
            f.write(f"--- {t.instance} ({t.role}, {len(t.completion_ids)} tokens, {t.finish})\nprompt: "
                    f"{prompt if len(prompt) <= 400 else prompt[:200] + ' [...] ' + prompt[-200:]}\n{t.text}\n")


def git_commit(folder=os.path.dirname(os.path.abspath(__file__))):
    """HEAD of the git checkout holding `folder` (this file's), with '-dirty' when tracked files differ from
    it; None outside a git checkout or without git."""
    return shutil.which("git") and subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40", "--exclude=*"],
                                                  cwd=folder, capture_output=True, text=True).stdout.strip() or None


# ---------------------------------------------------------------------------------------------
# the command line

def parse_args(argv=None):
    """The flags, checked: one line on stderr and exit code 2 for any bad value, before anything is
    loaded or written. With --resume, the run's saved settings (run_folder)."""
    head, gpus, tail = __doc__.partition("Several GPUs")  # --help: the common flags first, multi-GPU details last
    p = argparse.ArgumentParser(description=head, epilog=gpus + tail, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.error = refuse  # one line: argparse's prints the usage first
    # what to train
    p.add_argument("--workflow", choices=list(WORKFLOWS), default="evalopt", help="the workflow to train")
    p.add_argument("--policy", choices=["sp", "ip"], default="ip", help="shared or isolated adapters")
    p.add_argument("--task", choices=["math", "code"], default="math", help="task family")
    p.add_argument("--model", help="hub name, folder, .gguf or 'tiny' (default: Qwen/Qwen3-0.6B if loadable, else tiny)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 200; tiny: 6)")
    p.add_argument("--out", default=None, help="run directory, new or empty (default: runs/WORKFLOW-POLICY-TASK-TIME)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint with "
                   f"its saved settings; of the flags only {', '.join(flag(k) for k in RESUMABLE)} may change")
    p.add_argument("--data", default=None, help="training JSONL/JSON (default: built-in problems)")
    p.add_argument("--eval-data", default=None, help="held-out problems for --eval-every (default: built-in test split)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0, help="seeds data order, LoRA init and sampling")
    # rollouts
    p.add_argument("--problems", type=int, default=None, help="problems per step (default 16; tiny: 4)")
    p.add_argument("--group", type=int, default=None, help="rollouts per problem, the GRPO group (default 8; tiny: 4)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per role call (default 512; tiny: 24)")
    p.add_argument("--max-prompt-tokens", type=int, default=3072, help="longer role prompts end the episode (workflows.py)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (reference: 0.7)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (reference: 1.0)")
    p.add_argument("--rounds", type=int, default=None, help="Eval-Opt rounds (default: 3 math, 2 code)")
    p.add_argument("--voters", type=int, default=3, help="Voting generators per episode")
    # LoRA
    p.add_argument("--lora-rank", type=int, default=64, help="LoRA rank (reference: 64)")
    p.add_argument("--lora-alpha", type=float, default=32.0, help="LoRA alpha; scale = alpha / rank (reference: 32)")
    p.add_argument("--lora-dropout", type=float, default=0.0, help="dropout on the LoRA input during the update")
    p.add_argument("--lora-targets", default=None, help="comma list of linear names, e.g. q_proj,v_proj (default: all)")
    p.add_argument("--init-adapters", default=None, help="start from PEFT LoRA folders (lora.py export): DIR/<adapter>/ "
                   "per adapter, or DIR itself for every adapter; rank, alpha and targets must match")
    # optimisation
    p.add_argument("--lr", type=float, default=2e-5, help="AdamW learning rate (reference: 2e-5)")
    p.add_argument("--warmup", type=int, default=15, help="linear warm-up steps, at most --steps / 4 (reference: 15)")
    p.add_argument("--no-cosine", action="store_true", help="constant lr after warm-up instead of cosine decay to 0")
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (reference: 0.01)")
    p.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm per optimizer step (reference: 1.0)")
    # loss
    p.add_argument("--loss-agg", choices=grpo.AGGREGATIONS, default=grpo.AGGREGATIONS[0], help="token weighting (grpo.py)")
    p.add_argument("--role-weights", default=None, help="explicit per-role factors, e.g. generator=3,evaluator=1")
    p.add_argument("--parallel-steps", choices=["per-instance", "merged", "minibatch"], default="per-instance",
                   help="IP: a step per parallel instance (the reference's cut for Voting), one merged step, or a step "
                   "per mini-batch of the role's rows, a training step's episode count each (the reference's cut)")
    p.add_argument("--clip-low", type=float, default=0.2, help="PPO clip below 1 (reference: 0.2)")
    p.add_argument("--clip-high", type=float, default=0.28, help="PPO clip above 1 (reference: 0.28)")
    p.add_argument("--dual-clip", type=float, default=3.0, help="dual-clip cap for negative advantages, 0 = off")
    p.add_argument("--kl", default="0", help="KL-to-base coefficient: one number, or per role: evaluator=0.05")
    p.add_argument("--coherence", default="0", help="I6: lambda in [0, 1], one or per role (worker=0.5): scale a "
                   "role's gradient by 1 - lambda * max(0, cos(gradient, its EMA))")
    p.add_argument("--coherence-window", type=int, default=128, help="I6: the EMA's window, tau = 1 - 1/window")
    p.add_argument("--adv-mean-only", action="store_true", help="advantage r - mean without dividing by std")
    p.add_argument("--token-budget", type=int, default=16384, help="padded tokens per micro-batch in the update")
    # bookkeeping
    p.add_argument("--save-every", type=int, default=50, help="checkpoint cadence in steps (and at the end)")
    p.add_argument("--eval-every", type=int, default=0, help="held-out accuracy cadence in steps, 0 = off")
    p.add_argument("--eval-problems", type=int, default=64, help="held-out problems per evaluation")
    p.add_argument("--sample-every", type=int, default=10, help="write one episode as text to samples.txt every N steps")
    args = p.parse_args(argv)
    args = run_folder(p, argv, args) if args.out or args.resume else args
    # flag -> (test, what it must be); an unset flag (None: sized by the model, see SIZED) passes
    rules = {**dict.fromkeys(("steps", "problems", "max_new_tokens", "max_prompt_tokens", "rounds", "voters",
                              "lora_rank", "token_budget", "save_every", "eval_problems", "coherence_window"),
                           (lambda v: v >= 1, "at least 1")),
             **dict.fromkeys(("seed", "warmup", "eval_every", "sample_every", "weight_decay", "clip_high"),
                             (lambda v: v >= 0, "at least 0")),
             **dict.fromkeys(("lr", "temperature", "lora_alpha", "grad_clip"), (lambda v: v > 0, "> 0")),
             **dict.fromkeys(("clip_low", "lora_dropout"), (lambda v: 0 <= v < 1, "in [0, 1)")),
             "group": (lambda v: v >= 2, "at least 2 (advantages compare the rollouts of a problem)"),
             "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"), "dual_clip": (lambda v: v == 0 or v > 1, "0 (off) or > 1"),
             "device": (lambda v: not v.startswith("cuda") or torch.cuda.is_available(), "cpu (this torch sees no GPU)")}
    for name, (ok, what) in rules.items():
        if (v := getattr(args, name)) is not None and not (ok(v) and (not isinstance(v, float) or math.isfinite(v))):
            p.error(f"{flag(name)} must be {what}, got {v}")
    # derived settings: rebuilt on --resume rather than read back from config.json
    args.kl_coefs = parse_role_values(p, "--kl", args.kl, args.workflow, ">= 0")
    args.role_weight_map = parse_role_values(p, "--role-weights", args.role_weights, args.workflow, "> 0") \
        if args.role_weights else None
    args.coherence_map = parse_role_values(p, "--coherence", args.coherence, args.workflow, ">= 0")
    if max(args.coherence_map.values()) > 1:
        p.error(f"--coherence takes lambdas in [0, 1], got {args.coherence!r}")
    args.command = ["train.py", *(sys.argv[1:] if argv is None else argv)]  # for config.json
    return args


def flag(name):
    return "--" + name.replace("_", "-")


def refuse(message):
    """Bad input (a flag, or a file or folder it names): "error: MESSAGE" as one line on stderr (a multi-line
    exception joined) and exit code 2, argparse's for a usage error."""
    sys.exit(print(f"error: {message}".replace("\n", " "), file=sys.stderr) or 2)


def run_folder(p, argv, args):
    """--out and --resume checked against what the folder holds -> args, or under --resume the run's
    saved settings with the flags of RESUMABLE given now. --out must be new, empty or a run of train.py
    (nothing of someone else's is overwritten); a run with a checkpoint is only continued, by --resume.
    A flag given on --resume with another value than the run's is an error listing them all: training
    on with the old value, or switching halfway, would both mislabel the run. A flag that the run's
    config.json predates (an older train.py) takes its default, and one line says so. A run stopped
    before its first checkpoint has nothing to continue: it starts over from step 0 (run says so), with
    its saved settings under --resume, else with the flags given."""
    out = args.out or p.error("--resume needs --out DIR (the run to continue)")
    ours = (config := run_config(out)) is not None
    if not ours and os.path.exists(out) and not (os.path.isdir(out) and not os.listdir(out)):
        p.error(f"--out {out} is {'a file' if os.path.isfile(out) else 'a folder of something else'}: not a run of "
                "train.py, nor a new or empty folder")
    if ours and checkpoints(out) and not args.resume or args.resume and not ours:
        p.error(f"--resume: no run in {out}" if args.resume else f"{out} already holds a run; pass --resume to continue "
                "it or choose another --out")
    if not args.resume:
        return args
    unset, defaults = object(), vars(p.parse_args([]))
    given = vars(p.parse_args(argv, argparse.Namespace(**dict.fromkeys(defaults, unset))))  # unset: not on the line
    saved = {**defaults, **config, "model": config["model_used"]}  # the model it loaded, as it was named
    if changed := [f"{flag(k)} {saved[k]} (given: {v})" for k, v in given.items()
                   if v is not unset and v != saved[k] and k not in RESUMABLE + ("resume", "out")]:
        p.error(f"--resume: {out} was trained with {', '.join(changed)}; a resume may change only "
                f"{', '.join(map(flag, RESUMABLE))} (a new --out can change the rest)")
    if (new := [k for k in defaults if k not in config]) and os.environ.get("RANK", "0") == "0":  # an older train.py
        print(f"note: {out}/config.json predates {', '.join(f'{flag(k)} {defaults[k]}' for k in new)}: using these defaults")
    return argparse.Namespace(**{**saved, **{k: given[k] for k in RESUMABLE if given[k] is not unset},
                                 "resume": bool(checkpoints(out)), "out": out})


def run_config(out):
    """The config.json of run folder `out` when it is train.py's (a JSON object with its keys), else None."""
    with suppress(OSError, ValueError):  # no config.json, or not JSON: not a run of train.py
        config = json.loads(Path(out, "config.json").read_text())
        return config if isinstance(config, dict) and {"workflow", "task", "policy", "model_used"} <= config.keys() else None


def parse_role_values(p, flag, text, workflow, sign):
    """'0.1' -> {None: 0.1} (every role); 'generator=3,evaluator=1' -> {'generator': 3.0, ...}. A usage
    error (p.error) for a malformed text, a role that `workflow` does not have (a typo would silently
    train another ablation) and a value that is not `sign` ('> 0' or '>= 0')."""
    try:
        values = {None: float(text)} if "=" not in text else \
            {k.strip(): float(v) for k, v in (item.split("=") for item in text.split(",") if item.strip())}
    except ValueError:
        p.error(f"{flag} expects a number or role=number pairs separated by commas, got {text!r}")
    if unknown := sorted(set(values) - {None} - set(roles := WORKFLOWS[workflow].roles)):
        p.error(f"{flag}: no role {', '.join(unknown)} in {workflow} (its roles: {', '.join(roles)})")
    if bad := [v for v in values.values() if not (v > 0 if sign == "> 0" else v >= 0) or not math.isfinite(v)]:
        p.error(f"{flag} values must be {sign}, got {bad[0]}")
    return values


def role_value(values, role):
    return values.get(role, values.get(None, 0.0))


# ---------------------------------------------------------------------------------------------
# several processes (torchrun). In a plain `python train.py` no process group exists, world() is (0, 1),
# gather(x) is [x] and every hook leaves its input as a single process needs it. Elsewhere the ranks only
# show as: rank 0 alone prints and writes the run folder; a checkpoint holds every rank's RNG states.

def world():
    """(rank, world size); (0, 1) in a plain `python train.py`."""
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def rank_device(device):
    """cuda:LOCAL_RANK under torchrun on GPUs (one GPU per rank), else `device` as given."""
    cuda = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    if "LOCAL_RANK" not in os.environ or not cuda:
        return device
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return f"cuda:{os.environ['LOCAL_RANK']}"


def init_distributed(device):
    """Join torchrun's process group when launched by it (RANK in the environment) and no group
    exists yet (a caller such as a test may have set one up): NCCL on CUDA, gloo on CPU."""
    if "RANK" in os.environ and not dist.is_initialized():
        # a long timeout: the other ranks wait in their next collective while rank 0 evaluates and saves
        dist.init_process_group("nccl" if str(device).startswith("cuda") else "gloo", timeout=timedelta(hours=1))


def gather(obj):
    """Every rank's `obj` (small, picklable), in rank order, on every rank; [obj] in a plain run."""
    out = [obj] * world()[1]
    if dist.is_initialized():
        dist.all_gather_object(out, obj)  # fills `out`
    return out


def rank_seed(seed, rank, step=0):
    """Seed of a rank's sampling stream: `seed` for rank 0 at the start (a plain run is unchanged),
    else drawn from (seed, rank, step) so that ranks do not sample the same tokens."""
    return seed if rank == step == 0 else int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def seed_streams(gen, seed, step=0):
    """Seeds this rank's random streams from rank_seed(seed, rank, step): the sampler's generator `gen`
    (returned), and on ranks other than 0 torch's global one too (LoRA dropout), so that rank 0 keeps a
    plain run's streams. At the start, and on resume for a rank the saved run did not have."""
    if rank := world()[0]:
        torch.manual_seed(rank_seed(seed, rank, step))
    return gen.manual_seed(rank_seed(seed, rank, step))


def broadcast_adapters(model, adapters):
    """As DDP does: every rank starts from rank 0's adapter weights."""
    for name in adapters if world()[1] > 1 else []:
        for p in lora.adapter_parameters(model, name):
            dist.broadcast(p.data, 0)


def my_share(batch):
    """This rank's contiguous slice of the global batch. Whole problems, so GRPO groups stay on one
    rank; contiguous, so that rank order is batch order and gathered rows line up with one process's."""
    rank, n = world()
    return batch[rank * len(batch) // n:(rank + 1) * len(batch) // n]


def step_token_weights(roles, lengths, args):
    """grpo.token_weights of this rank's rows, normalised over the rows of EVERY rank in this
    optimizer step, so that each rank's loss is exactly its part of the single-process loss and the
    summed gradients are the single-process gradient. Normalising per rank instead would weigh a
    row by 1 / (its rank's rows), not 1 / (all rows). Gathering the (role, length) of every row and
    calling the same function keeps one implementation of the weighting (a few ints per row)."""
    parts = gather((roles, lengths))
    weights, shares = grpo.token_weights([r for p in parts for r in p[0]], [n for p in parts for n in p[1]],
                                         args.loss_agg, args.role_weight_map)
    start = sum(len(p[1]) for p in parts[:world()[0]])  # this rank's rows follow those of the ranks before it
    return weights[start:start + len(lengths)], shares


def sum_over_ranks(params, role_grads, finite):
    """optimizer_step's hook -> whether every rank's loss was finite. Each role's part of the gradient
    (role_grads, flat) is summed over the ranks in place, so the per-role norms logged are global, and
    their total becomes the gradient of `params`: with the weights of step_token_weights, the
    single-process gradient. Every rank then clips and steps alike, and the adapters stay identical."""
    if world()[1] == 1:
        return finite
    for grad in role_grads.values():
        dist.all_reduce(grad)  # a sum
    for p, g in zip(params, sum(role_grads.values()).split([p.numel() for p in params]) if role_grads else []):
        p.grad = g.view_as(p)
    return all(gather(finite))


def whole_batch(episodes, adv, singletons, stats):
    """train_step's hook: the metrics are those of the whole batch, so under torchrun every rank's
    episodes (without the prompt ids and sampling log-probs, which no metric reads), advantages and
    update sums (into `stats`), in batch order -> (episodes, rows, advantages, singleton groups)."""
    if world()[1] > 1:
        summed = ("entropy_sum", "clipped", "kl_sum", "train_tokens", "gap_sum")
        light = [replace(ep, turns=[replace(t, prompt_ids=[], logprobs=[]) for t in ep.turns]) for ep in episodes]
        parts = gather((light, adv, singletons, stats))
        episodes, adv = [ep for p in parts for ep in p[0]], [a for p in parts for a in p[1]]
        singletons = sum(p[2] for p in parts)
        for role, s in stats.items():
            s.update({k: sum(p[3][role][k] for p in parts) for k in summed})
            # lists of one entry per optimizer step, summed entry by entry: every rank walks each optimizer step
            s.update({k: [sum(x) for x in zip(*[p[3][role][k] for p in parts])] for k in ("losses", "rows_run")})
    return episodes, [t for ep in episodes for t in ep.turns], adv, singletons


if __name__ == "__main__":
    main()
