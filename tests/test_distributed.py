"""train.py under torchrun: two gloo processes on CPU take the same training step as one process.

Sampling streams differ by rank (each rank seeds its own), so both runs get their rollouts from a
scripted policy instead of the sampler: the completion of a call depends only on (role, prompt text,
how often that text came before in the step), i.e. on the problem, the rollout and the instance,
never on the rank or its RNG. Rewards (parity of the answer's length, as in test_train.py) then vary
within groups, the advantages are non-zero, and everything after the rollouts is train.py's real
code: advantages, old log-probs, token weights, backward, all-reduce, clipping, AdamW, checkpoints,
metrics. With 3 problems on 2 ranks, rank 0 rolls out 1 problem and rank 1 two, so per-rank and
global normalisation of the token weights differ, and the test shows that the per-rank version fails.

Compared after one step (rank 0's checkpoint vs the single-process one):
- AdamW's first moment (0.1 x the clipped, reduced gradient), max difference <= RTOL = 2e-5 of its
  largest entry. The two runs batch rows differently (other padding, other matmul shapes), so
  float rounding differs: measured ~2e-6 here; the per-rank-weights bug gives ~0.5.
- adapters: max abs difference <= ATOL = 0.05 lr. AdamW's first step moves a weight by
  lr * g / (|g| + 1e-8), about +-lr, so a wrong gradient flips signs (differences of ~2 lr), while
  rounding only shows in the few entries with |g| near 1e-8: measured <= 0.007 lr here; the bug
  gives ~5 lr. The moment comparison is the sharp one: it sees the gradient's magnitude.
- the logged metrics (rows, weight shares, per-role gradient norms, loss sums, ...): rel 1e-5,
  abs 1e-6.

The same file is the torchrun worker: `python -m torch.distributed.run --standalone --nproc_per_node 2
tests/test_distributed.py OUT` runs the 2-rank side (one launch for every case, to keep startup
cost down). Run the test: python -m pytest -q tests/test_distributed.py (about 20 s on 2 cores).
"""
import json
import os
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import data  # noqa: E402
import grpo  # noqa: E402
import models  # noqa: E402
import train  # noqa: E402
import workflows  # noqa: E402

LR = 1e-3
ATOL = 0.05 * LR
RTOL = 2e-5
COMMON = ["--device", "cpu", "--problems", "3", "--group", "4", "--steps", "1",
          "--lr", str(LR), "--warmup", "1", "--lora-rank", "8", "--save-every", "1", "--seed", "0"]
CASES = {
    # a parallel role under IP, one optimizer step per voter (the reference), reference weighting
    "voting-ip": ["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance"],
    # rank 0's problem gets 3 workers, rank 1's problems 1 each: rank 1 joins the worker1 and
    # worker2 steps with no rows (a zero gradient)
    "orchworkers-ip": ["--workflow", "orchworkers", "--policy", "ip", "--parallel-steps", "per-instance",
                       "--loss-agg", "token-mean"],
    # the reference's cut of the workers' rows: 12 a step (the batch's episodes) over both ranks' rows in order: rank 0's
    # 12 workers, then rank 1's 8, so each rank must place its rows in the whole batch, not cut its own
    "orchworkers-minibatch": ["--workflow", "orchworkers", "--policy", "ip", "--parallel-steps", "minibatch"],
    # SP: both roles in one step; retries vary per episode, so ranks hold different row counts
    "evalopt-sp": ["--workflow", "evalopt", "--policy", "sp", "--loss-agg", "role-balanced",
                   "--role-weights", "evaluator=3"],
}
FIRST = train.draw_problems(data.builtin_problems("math", "train", seed=0), 0, 3, 0)[0]["prompt"]  # rank 0's problem


def scripted_make_policy(model, tokenizer, adapters, **kw):
    """Stands in for workflows.make_policy: deterministic Turns, real chat prompts."""
    seen = {}

    def policy(role, texts):
        calls = []
        for text in texts:
            j = seen[role, text] = seen.get((role, text), -1) + 1  # rollout / instance within the problem
            rng = np.random.default_rng([zlib.crc32(f"{role}\n{text}".encode()), j])
            ids = rng.integers(5, 574, size=int(rng.integers(2, 9))).tolist()  # 0-4: special tokens
            reply = {"evaluator": [r"\boxed{Correct}", r"Check the sum. \boxed{Incorrect}"][rng.integers(2)],
                     "aggregator": rf"\boxed{{{rng.integers(1, 4)}}}",
                     "orchestrator": "\n".join(f"STRATEGY {k}: way {k}" for k in range(1, 4 if FIRST in text else 2)),
                     }.get(role, "x" * int(rng.integers(1, 9)))
            calls.append(workflows.Turn(role, role, models.chat_ids(tokenizer, text), ids, [0.0] * len(ids), "stop", reply))
        return calls
    return policy


def parity_grade(completions, problems, **kw):
    return [(float(len(c) % 2 == 0), "correct" if len(c) % 2 == 0 else "wrong") for c in completions]


def per_rank_token_weights(roles, lengths, args):
    """The bug the global normalisation avoids: each rank normalises over its own rows only."""
    return grpo.token_weights(roles, lengths, args.loss_agg, args.role_weight_map)


def patch(setattr_):
    setattr_(train, "make_policy", scripted_make_policy)
    setattr_(workflows.rewards, "grade", parity_grade)


def worker(out):
    """The 2-rank side, run by torchrun: each case, the per-rank-weights bug, a resume of a
    1-process checkpoint on 2 ranks, a 2-rank run with real sampling resumed on 2 ranks. One process
    group for all (train.main uses a group it finds; gloo cannot be set up twice under one torchrun
    rendezvous). The model is the tiny one, built into a folder by the test beforehand (once a group
    exists, transformers' save_pretrained writes on rank 0 only)."""
    torch.set_num_threads(1)  # two processes on two cores
    torch.distributed.init_process_group("gloo")
    patch(setattr)
    model = ["--model", f"{out}/tiny-model"]
    for name, flags in CASES.items():
        train.main([*COMMON, *model, *flags, "--out", f"{out}/{name}-2"])
    global_weights, train.step_token_weights = train.step_token_weights, per_rank_token_weights
    train.main([*COMMON, *model, *CASES["voting-ip"], "--out", f"{out}/voting-ip-per-rank-weights-2"])
    train.step_token_weights = global_weights
    train.main(["--out", f"{out}/resume-on-2", "--resume", "--steps", "2"])
    train.make_policy = workflows.make_policy  # real sampling: each rank its own stream
    sampled = [*COMMON, *model, *CASES["voting-ip"], "--max-new-tokens", "8"]
    train.main([*sampled, "--steps", "2", "--out", f"{out}/sampled-2steps-2"])
    train.main([*sampled, "--out", f"{out}/sampled-resumed-2"])
    train.main(["--out", f"{out}/sampled-resumed-2", "--resume", "--steps", "2"])
    torch.distributed.destroy_process_group()


# ------------------------------------------------------------------------------------------ checks

def state(out, step):
    folder = os.path.join(out, f"step_{step:06d}")
    adapters = {f: load_file(os.path.join(folder, f)) for f in sorted(os.listdir(folder)) if f.endswith(".safetensors")}
    saved = torch.load(os.path.join(folder, "state.pt"), weights_only=False)
    # AdamW's first moments per parameter; a string key holds a tensor of its own (I6's EMA, "coherence/ROLE")
    moments = {(k, i): s["exp_avg"] if isinstance(i, int) else s for k, o in saved["optimizers"].items()
               for i, s in o["state"].items()}
    return adapters, moments


def differences(a_out, b_out, step=1):
    """(max abs adapter difference, max first-moment difference relative to its largest entry)."""
    (a, ma), (b, mb) = state(a_out, step), state(b_out, step)
    assert a.keys() == b.keys() and ma.keys() == mb.keys()
    d_w = max((a[f][k] - b[f][k]).abs().max().item() for f in a for k in a[f])
    d_m = max((ma[k] - mb[k]).abs().max().item() for k in ma) / max(m.abs().max().item() for m in ma.values())
    return d_w, d_m


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if k != "time"} for line in f]


def assert_close_tree(a, b, path=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_close_tree(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and a and isinstance(a[0], dict):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_tree(x, y, f"{path}[{i}]")
    elif isinstance(a, list) and a and isinstance(a[0], float):  # per-optimizer-step values (grad_norms)
        assert b == pytest.approx(a, rel=1e-5, abs=1e-6), path
    elif isinstance(a, float) and isinstance(b, (int, float)):
        # abs: sums such as the loss cancel to ~0 (advantages have mean 0), leaving rounding noise
        assert b == pytest.approx(a, rel=1e-5, abs=1e-6), path
    else:
        assert a == b, path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("dist"))
    models.build_tiny(f"{out}/tiny-model")
    model = ["--model", f"{out}/tiny-model"]
    with pytest.MonkeyPatch.context() as mp:
        patch(mp.setattr)
        for name, flags in CASES.items():
            train.main([*COMMON, *model, *flags, "--out", f"{out}/{name}-1"])
        # uninterrupted 2 steps, and its first step alone, to be continued on 2 ranks by the worker
        train.main([*COMMON, *model, *CASES["voting-ip"], "--steps", "2", "--out", f"{out}/voting-ip-2steps-1"])
        train.main([*COMMON, *model, *CASES["voting-ip"], "--out", f"{out}/resume-on-2"])
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           os.path.abspath(__file__), out], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    print(f"torchrun with 2 gloo ranks: {time.perf_counter() - t0:.1f} s")
    log = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if "it/s" not in line)
    assert proc.returncode == 0, log[-8000:]  # the ranks' tracebacks come before torchrun's own
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_take_the_single_process_step(runs, case):
    one, two = f"{runs}/{case}-1", f"{runs}/{case}-2"
    d_w, d_m = differences(one, two)
    assert d_w <= ATOL and d_m <= RTOL, (d_w, d_m)
    m1, m2 = metrics(one), metrics(two)
    assert_close_tree(m1, m2)
    m = m1[0]
    assert 0 < m["reward_mean"] < 1 and all(r["grad_norm"] > 0 for r in m["roles"].values())  # a real update
    if case == "orchworkers-ip":
        assert m["roles"]["worker"]["optimizer_steps"] == 3 and m["workflow"]["mean_strategies"] == 5 / 3
    if case == "orchworkers-minibatch":
        assert m["roles"]["worker"]["optimizer_steps"] == 2 and m["roles"]["worker"]["rows"] == 20
    # rank 0 alone wrote the run folder
    assert sorted(os.listdir(two)) == ["config.json", "metrics.jsonl", "samples.txt", "step_000001"]


def test_per_rank_normalisation_would_fail(runs):
    """Each rank normalising over its own rows (1 problem vs 2) gives another update."""
    d_w, d_m = differences(f"{runs}/voting-ip-1", f"{runs}/voting-ip-per-rank-weights-2")
    assert d_w > LR and d_m > 1000 * RTOL, (d_w, d_m)  # weights moved the other way; gradients differ


def test_resume_across_world_sizes(runs, monkeypatch):
    """A 1-process checkpoint continued on 2 ranks, and a 2-rank checkpoint continued in 1 process,
    both reach the uninterrupted 1-process run's step 2 (the data position is global)."""
    patch(monkeypatch.setattr)
    reference = f"{runs}/voting-ip-2steps-1"
    back = f"{runs}/voting-ip-2"
    train.main(["--out", back, "--resume", "--steps", "2"])
    for other in (f"{runs}/resume-on-2", back):
        d_w, d_m = differences(reference, other, step=2)
        assert d_w <= ATOL and d_m <= RTOL, (other, d_w, d_m)
        assert_close_tree(metrics(reference), metrics(other))


def test_resume_on_two_ranks_is_exact_with_real_sampling(runs):
    """With the real sampler, 1 step + resume equals 2 uninterrupted steps on 2 ranks: every rank's
    sampling stream is saved and restored (a fresh stream on rank 1 would sample other tokens)."""
    a, b = f"{runs}/sampled-2steps-2", f"{runs}/sampled-resumed-2"
    assert differences(a, b, step=2) == (0.0, 0.0)
    assert metrics(a) == metrics(b) and all(r["grad_norm"] > 0 for r in metrics(a)[1]["roles"].values())
    saved = torch.load(f"{b}/step_000002/state.pt", weights_only=False)
    assert len(saved["rng_ranks"]) == 1 and not torch.equal(saved["rng"]["sampler"], saved["rng_ranks"][0]["sampler"])


if __name__ == "__main__":
    worker(sys.argv[1])
