"""train.py end to end on the tiny model: a 2-step smoke run of every workflow x policy, exact
resume, optimizer-step counts, IP isolation, non-finite steps, clear errors for bad input (one line,
exit code 2, nothing written), resume refusals and restarts, and what config.json and samples.txt record."""
import json
import math
import os
import platform
import subprocess
import sys

import pytest
from pathlib import Path
import torch
from safetensors.torch import load_file

import train
import workflows

SMALL = ["--model", "tiny", "--problems", "2", "--group", "2", "--max-new-tokens", "6", "--device", "cpu"]


def fake_grade(completions, problems, **kw):
    """A grader the random tiny model can pass: reward 1 for texts of even length. Real grading is
    tested in test_rewards.py; here we need non-zero advantages so updates really change weights."""
    return [(float(len(c) % 2 == 0), "correct" if len(c) % 2 == 0 else "wrong") for c in completions]


def alternate_grade(completions, problems, **kw):
    """Rewards 0, 1, 0, 1, ...: every group of 2 rollouts has both, so no advantage is 0 and every row
    runs in the update (rows with advantage 0 are skipped there)."""
    return [(float(i % 2), "wrong") for i in range(len(completions))]


def read_metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("workflow", list(workflows.WORKFLOWS))
@pytest.mark.parametrize("policy", ["sp", "ip"])
def test_two_step_smoke_run(tmp_path, workflow, policy, monkeypatch):
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    out = str(tmp_path / "run")
    train.main(["--workflow", workflow, "--policy", policy, "--steps", "2", "--out", out, *SMALL])
    m = read_metrics(out)
    assert [x["step"] for x in m] == [1, 2]
    roles = set(m[0]["roles"])
    assert roles == set(workflows.WORKFLOWS[workflow].roles)  # every role produced rows and is logged
    names = {"shared"} if policy == "sp" else set(workflows.WORKFLOWS[workflow].roles)
    assert {f[:-12] for f in os.listdir(os.path.join(out, "step_000002")) if f.endswith(".safetensors")} == names
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["workflow"] == workflow and config["model_used"] == "tiny"
    shares = sum(r["weight_share"] for r in m[0]["roles"].values())
    assert shares == pytest.approx(1.0 if policy == "sp" else len(m[0]["roles"]))
    t = m[0]["time"]  # where a step's seconds go: each sampler call (stage), each adapter's update
    assert {s[0] for s in t["stages"]} == roles and sum(s[1] for s in t["stages"]) == m[0]["rows"]
    assert sum(s[2] for s in t["stages"]) == sum(r["tokens"] for r in m[0]["roles"].values())
    assert sum(s[3] for s in t["stages"]) <= t["rollout"] and sum(t["update_by_adapter"].values()) <= t["update"]
    assert set(t["update_by_adapter"]) <= names


def test_code_task_smoke_run(tmp_path):
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--task", "code", "--steps", "1", "--out", out, *SMALL])
    assert read_metrics(out)[0]["grade_status"] == {"no_code": 4}  # fails closed, and is counted


def adapters_of(out, step):
    folder = os.path.join(out, f"step_{step:06d}")
    return {f: load_file(os.path.join(folder, f)) for f in sorted(os.listdir(folder)) if f.endswith(".safetensors")}


def strip_time(m):
    return [{k: v for k, v in x.items() if k != "time"} for x in m]


def test_resume_equals_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    args = ["--workflow", "evalopt", "--policy", "ip", "--lr", "1e-3", "--warmup", "1", "--steps", "4",
            "--save-every", "2", "--kl", "0.05", "--sample-every", "1", *SMALL]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train.main([*args, "--out", full])
    real_step = train.train_step

    def crash_in_step_4(*a):
        if a[-1] == 4:  # the step number: an abort in the middle of step 4
            raise KeyboardInterrupt
        return real_step(*a)
    monkeypatch.setattr(train, "train_step", crash_in_step_4)
    with pytest.raises(KeyboardInterrupt):
        train.main([*args, "--out", part])
    monkeypatch.setattr(train, "train_step", real_step)
    # step 3 was logged but never checkpointed (every 2 steps): resume drops and redoes it
    assert [x["step"] for x in read_metrics(part)] == [1, 2, 3]
    moved = str(tmp_path / "moved")  # a run folder can be moved and still resumed where it is now
    os.rename(part, moved)
    part = moved
    train.main(["--out", part, "--resume"])
    assert not os.path.exists(str(tmp_path / "part"))
    a, b = adapters_of(full, 4), adapters_of(part, 4)
    assert a.keys() == b.keys() == {"generator.safetensors", "evaluator.safetensors"}
    for name in a:
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), (name, key)
    assert strip_time(read_metrics(full)) == strip_time(read_metrics(part))
    # the optimizers ran at lr x lr_factor: --warmup 1 --steps 4 gives 1, then cosine over 3 steps: 1, 0.75, 0.25
    assert [x["lr"] for x in read_metrics(part)] == pytest.approx([1e-3, 1e-3, 7.5e-4, 2.5e-4])
    assert open(os.path.join(full, "samples.txt")).read() == open(os.path.join(part, "samples.txt")).read()
    assert all(r["grad_norm"] > 0 for x in read_metrics(full) for r in x["roles"].values())
    assert all(r["kl"] > 0 for x in read_metrics(part)[1:] for r in x["roles"].values())  # KL survives resume
    # the adapters really moved: step 2 and step 4 differ
    two = adapters_of(full, 2)["generator.safetensors"]
    assert any(not torch.equal(two[k], a["generator.safetensors"][k]) for k in two)


def test_coherence_scale_by_hand():
    """I6 on numbers: cos([1, 0], [1, 1]) = 1/sqrt(2); lambda 0.5 -> scale 1 - 0.5 / sqrt(2); window 4 -> tau
    0.75, EMA 0.75 [1, 1] + 0.25 scale [1, 0]. A gradient against the EMA (cos < 0) is left alone; with no EMA
    yet (zeros), cos is 0 and the EMA becomes (1 - tau) x the gradient."""
    state, s = {"coherence/generator": torch.tensor([1.0, 1.0])}, train.role_stats()
    scale = train.coherence_scale(state, "generator", torch.tensor([1.0, 0.0]), 0.5, 4, s)
    assert scale == pytest.approx(1 - 0.5 / math.sqrt(2))
    torch.testing.assert_close(state["coherence/generator"], torch.tensor([0.75 + 0.25 * scale, 0.75]))
    assert s["coherence"] == [(pytest.approx(1 / math.sqrt(2)), scale)]
    assert train.coherence_scale(state, "generator", torch.tensor([-1.0, -1.0]), 0.5, 4, s) == 1.0
    fresh = {}
    assert train.coherence_scale(fresh, "evaluator", torch.tensor([2.0, 4.0]), 1.0, 4, s) == 1.0
    torch.testing.assert_close(fresh["coherence/evaluator"], torch.tensor([0.5, 1.0]))


def test_coherence_lambda_0_is_bit_for_bit_and_the_ema_survives_resume(tmp_path, monkeypatch):
    """--coherence generator=0 trains exactly as no --coherence. With a lambda, cos and scale are logged per
    step (step 1: no history, cos 0); the EMA is in the checkpoint, so a resumed run's later cosines (which
    read the EMA) equal the uninterrupted run's."""
    monkeypatch.setattr(workflows.rewards, "grade", alternate_grade)
    args = ["--workflow", "single", "--policy", "ip", "--lr", "1e-3", "--warmup", "0", "--no-cosine", *SMALL]
    on = ["--coherence", "generator=0.9", "--coherence-window", "2"]
    for name, extra, steps in [("off", [], 3), ("zero", ["--coherence", "generator=0"], 3), ("on", on, 3),
                               ("part", on, 2)]:
        train.main([*args, *extra, "--steps", str(steps), "--out", str(tmp_path / name)])
    train.main(["--out", str(tmp_path / "part"), "--resume", "--steps", "3"])
    off, zero = (adapters_of(str(tmp_path / n), 3)["generator.safetensors"] for n in ("off", "zero"))
    assert all(torch.equal(off[k], zero[k]) for k in off)
    cos = lambda n: [x["roles"]["generator"]["coherence_cos"] for x in read_metrics(str(tmp_path / n))]
    assert cos("on")[0] == 0 and all(c != 0 for c in cos("on")[1:]) and cos("part") == cos("on")
    assert "coherence_cos" not in read_metrics(str(tmp_path / "off"))[0]["roles"]["generator"]


def test_coherence_scales_the_applied_gradient(tiny, scratch_adapter):
    """Two optimizer steps on the same rows: the second gradient points nearly where the first (the EMA) did,
    so cos ~ 1 and the gradient AdamW receives is scale x the raw one (scale = 1 - lambda cos; no clipping)."""
    import lora
    model, _ = tiny
    scratch_adapter("coh", seed=3)
    opt = torch.optim.AdamW(lora.adapter_parameters(model, "coh"), lr=1e-3)
    args = train.parse_args(["--coherence", "generator=0.5", "--grad-clip", "1e9", "--workflow", "single"])
    stats, rows = _stats(), _rows()
    for _ in range(2):
        assert train.optimizer_step(model, "coh", rows, [1.0, -1.0, 0.5], [None] * 3, [None] * 3, opt, args, stats)
    (cos1, scale1), (cos2, scale2) = stats["generator"]["coherence"]
    assert (cos1, scale1) == (0.0, 1.0) and cos2 > 0.9 and scale2 == pytest.approx(1 - 0.5 * cos2)
    applied = torch.cat([p.grad.flatten() for p in lora.adapter_parameters(model, "coh")]).norm()
    assert float(applied) == pytest.approx(scale2 * stats["generator"]["grad_norms"][-1], rel=1e-5)
    assert "coherence/generator" in opt.state_dict()["state"]


def test_coherence_under_sp_scales_only_its_roles_part(tiny, scratch_adapter):
    """SP: one adapter, two roles, --coherence generator=0.5. Second step on the same rows: the gradient AdamW
    receives is the evaluator's part as it was plus scale x the generator's part (the parts measured by the
    same steps without --coherence)."""
    import copy
    import lora
    model, _ = tiny
    rows = _rows() + [workflows.Turn("evaluator", "evaluator", [3, 1], [5, 9, 2], [-1.0] * 3, "stop", "e")]
    adv = [1.0, -1.0, 0.5, -0.7]
    applied, stats = {}, {}
    for coh in ("0", "generator=0.5"):
        scratch_adapter(f"sp{len(applied)}", seed=5)  # the same start for both
        name = f"sp{len(applied)}"
        opt = torch.optim.AdamW(lora.adapter_parameters(model, name), lr=1e-3)
        args = train.parse_args(["--workflow", "evalopt", "--policy", "sp", "--coherence", coh, "--grad-clip", "1e9"])
        stats[coh] = {"generator": train.role_stats(), "evaluator": train.role_stats()}
        parts = []
        real = train.sum_over_ranks
        train.sum_over_ranks = lambda params, role_grads, finite: (parts.append(copy.deepcopy(role_grads)), real(
            params, role_grads, finite))[1]
        try:
            for _ in range(2):
                assert train.optimizer_step(model, name, rows, adv, [None] * 4, [None] * 4, opt, args, stats[coh])
        finally:
            train.sum_over_ranks = real
        applied[coh] = (torch.cat([p.grad.flatten() for p in lora.adapter_parameters(model, name)]), parts[-1])
    scale = stats["generator=0.5"]["generator"]["coherence"][-1][1]
    assert scale < 0.9 and not stats["generator=0.5"]["evaluator"]["coherence"]
    grad, parts = applied["generator=0.5"]
    # atol: the parts are differences of accumulated gradients, so the sum is exact only to rounding (1.9e-9 seen
    # with transformers 5.24, two threads); leaving the generator's part unscaled moves elements by ~1e-5
    torch.testing.assert_close(grad, parts["evaluator"] + scale * parts["generator"], rtol=1e-5, atol=1e-8)


def test_coherence_skips_a_non_finite_gradient(tiny, scratch_adapter):
    """A step whose gradient is not finite is skipped (as without --coherence) and leaves the EMA as it was:
    the next step trains normally (review finding: a NaN EMA froze the adapter for good)."""
    import lora
    model, _ = tiny
    scratch_adapter("nan", seed=4)
    params = lora.adapter_parameters(model, "nan")
    opt = torch.optim.AdamW(params, lr=1e-3)
    args = train.parse_args(["--coherence", "generator=0.5", "--workflow", "single"])
    stats, rows = _stats(), _rows()
    step = lambda: train.optimizer_step(model, "nan", rows, [1.0, -1.0, 0.5], [None] * 3, [None] * 3, opt, args, stats)
    assert step()
    ema = opt.state["coherence/generator"].clone()
    hook = params[0].register_hook(lambda g: g * float("inf"))
    assert not step()
    hook.remove()
    assert torch.equal(opt.state["coherence/generator"], ema)
    assert step() and torch.isfinite(opt.state["coherence/generator"]).all()
    assert len(stats["generator"]["coherence"]) == 2 and all(math.isfinite(c) for c, _ in stats["generator"]["coherence"])


def test_resume_of_finished_run_says_so(tmp_path, capsys):
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--steps", "1", "--out", out, *SMALL])
    train.main(["--out", out, "--resume"])
    assert "already finished" in capsys.readouterr().out


@pytest.mark.parametrize("cut", ['{"step": 2, "rew', '{"step": 2, "time": {"rollout": 0.5}', '{"step": 2}'])
def test_resume_drops_a_metrics_line_cut_off_by_a_kill(tmp_path, capsys, cut):
    """Review finding: a metrics.jsonl line cut off mid-write (kill, full disk) was parsed before the
    file was rewritten, so --resume refused a good checkpoint after emptying the log. Then a line cut
    right after a nested "}" (the old test: does the line end in "}") still refused it (exit 2). Now any
    last line without its newline is dropped, with one warning naming the file, and the run goes on."""
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--steps", "1", "--out", out, *SMALL])
    path = os.path.join(out, "metrics.jsonl")
    with open(path, "a") as f:
        f.write(cut)
    capsys.readouterr()
    train.main(["--out", out, "--resume", "--steps", "2"])
    assert [m["step"] for m in read_metrics(out)] == [1, 2]  # every line parses, none is lost
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"warning: {path}: dropped a cut-off last line ({len(cut)} bytes)"]


@pytest.mark.parametrize("victim", ["config.json", "metrics.jsonl", "samples.txt"])
def test_a_kill_while_resume_rewrites_its_files_loses_nothing(tmp_path, monkeypatch, victim):
    """A resume rewrites config.json, metrics.jsonl and samples.txt: each through a temporary file and a rename, so a
    kill mid-write (here: half the text written, then the process stops) leaves the old file whole (a new user's
    review: they were rewritten in place, and a kill in that window emptied them)."""
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--steps", "2", "--save-every", "1", "--sample-every", "1", "--out", out, *SMALL])
    before = {f: Path(out, f).read_text() for f in ("config.json", "metrics.jsonl", "samples.txt")}
    write = Path.write_text

    def killed_mid_write(self, text, *a, **k):
        if self.name.startswith(victim):  # the file itself, or its temporary twin
            write(self, text[:len(text) // 2], *a, **k)
            raise KeyboardInterrupt  # not an Exception: nothing on the way catches it
        return write(self, text, *a, **k)
    monkeypatch.setattr(Path, "write_text", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        train.main(["--out", out, "--resume", "--steps", "3"])
    assert {f: Path(out, f).read_text() for f in before} == before


def test_per_token_metrics_are_none_when_the_update_ran_no_row(tmp_path):
    """Review finding: with every advantage 0 no row runs, and entropy, clip fraction, kl and the gap
    were logged as 0.0, which reads as a collapsed policy. They are None: nothing was measured."""
    out = str(tmp_path / "run")
    train.main(["--workflow", "evalopt", "--steps", "1", "--out", out, *SMALL])  # the tiny model: reward 0
    m = read_metrics(out)[0]
    assert m["zero_advantage_rows"] == m["rows"]
    assert all(r[k] is None for r in m["roles"].values() for k in ("entropy", "clip_fraction", "kl", "logprob_gap"))


@pytest.mark.parametrize("mode,steps", [("per-instance", 3 + 1), ("merged", 1 + 1)])
def test_parallel_step_counts(tmp_path, mode, steps, monkeypatch):
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    out = str(tmp_path / mode)
    train.main(["--workflow", "voting", "--policy", "ip", "--parallel-steps", mode, "--steps", "1",
                "--out", out, *SMALL])
    m = read_metrics(out)[0]
    assert m["optimizer_steps"] == steps
    assert m["roles"]["generator"]["optimizer_steps"] == steps - 1
    assert m["roles"]["aggregator"]["optimizer_steps"] == 1
    assert 0 <= m["workflow"]["pick_default"] <= m["workflow"]["pick_unboxed"] <= 1


@pytest.mark.parametrize("mode, lr", [("per-instance", "0.05"), ("merged", "0.05"), ("per-instance", "1e-30")])
def test_old_logprobs_are_recomputed_only_for_several_steps(tmp_path, mode, lr, monkeypatch):
    """Per-instance voters take three steps on one adapter: the second and third must compare with
    the policy from before the first (recomputed old log-probs, ratio != 1 after an update). An
    adapter's only step (merged voters, the aggregator) uses its own log-probs: ratio exactly 1. With lr ~0
    every recomputed row's old log-probs match its own training forward's (each row gets its own: the
    recomputation batches only the rows it needs, other micro-batches than the update's)."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    # advantages +-1 on every row, so the first voter step surely moves the policy (the fake rewards of 2 x 2
    # rollouts can be equal within every group, and then nothing would change whatever the code did)
    monkeypatch.setattr(train.grpo, "group_advantages", lambda keys, *a, **k: ([(-1.0) ** i for i in range(len(keys))], 0))
    gaps, real = [], train.grpo.token_loss
    monkeypatch.setattr(train.grpo, "token_loss", lambda lp, old, *a, **k: (
        gaps.append(float((lp.detach() - old).abs().max())), real(lp, old, *a, **k))[1])
    train.main(["--workflow", "voting", "--policy", "ip", "--parallel-steps", mode, "--steps", "1",
                "--lr", lr, "--warmup", "0", "--out", str(tmp_path / mode), *SMALL])
    if lr == "1e-30":  # AdamW moves no fp32 weight by that
        assert len(gaps) >= 3 and max(gaps) < 1e-4
    elif mode == "merged":
        assert gaps and all(g == 0.0 for g in gaps)
    else:
        assert any(g > 1e-3 for g in gaps)  # a later voter step sees the changed policy
        assert min(gaps) < 1e-4             # the first step's recomputed old log-probs match (fp32)


def _rows():
    return [workflows.Turn("generator", "generator", [1, 2, 3], [4, 5], [-1.0, -1.0], "stop", "x"),
            workflows.Turn("generator", "generator", [1, 2], [6, 7, 8], [-1.0] * 3, "stop", "y"),
            workflows.Turn("generator", "generator", [9, 2, 3, 4, 5, 6, 7], [6, 8], [-1.0] * 2, "stop", "z")]


def _stats():
    return {"generator": train.role_stats()}


def test_ip_step_changes_only_its_own_adapter(tiny, scratch_adapter):
    import lora
    from grpo import completion_logprobs
    model, tok = tiny
    for seed, name in enumerate(("g_only", "e_only")):
        scratch_adapter(name, seed=seed)  # non-zero B: both adapters affect the outputs
    before = {n: [p.detach().clone() for p in lora.adapter_parameters(model, n)] for n in ("g_only", "e_only")}
    rows = _rows()
    lora.set_adapter(model, "g_only")
    with torch.no_grad():
        old = completion_logprobs(model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows])[0]
    # one optimizer over BOTH adapters, no weight decay: e_only changes iff it received a gradient
    opt = torch.optim.AdamW(lora.adapter_parameters(model, "g_only") + lora.adapter_parameters(model, "e_only"),
                            lr=1e-2, weight_decay=0.0)
    args = train.parse_args([])
    assert train.optimizer_step(model, "g_only", rows, [1.0, -1.0, 0.5], old, [None] * 3, opt, args, _stats())
    after = {n: lora.adapter_parameters(model, n) for n in ("g_only", "e_only")}
    assert any(not torch.equal(b, a) for b, a in zip(before["g_only"], after["g_only"]))
    assert all(torch.equal(b, a) for b, a in zip(before["e_only"], after["e_only"]))


def close_grads(actual, expected):
    """Equal up to float32 summation order: the tolerance scales with the gradient (differences seen:
    at most 1e-6 of its largest entry over 12 seeds), far below what a wrong weight or a missing row
    changes (tens of percent)."""
    assert expected.abs().max() > 0
    torch.testing.assert_close(actual, expected, atol=1e-5 * expected.abs().max().item(), rtol=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 11])  # seeds 1 and 11 broke the old fixed atol of 1e-7
def test_optimizer_step_gradient_does_not_depend_on_the_token_budget(tiny, scratch_adapter, seed):
    """train.optimizer_step's own micro-batching (per role, budget from prompt + completion tokens)
    against one big batch: same gradient, in every aggregation mode. Regression: with atol 1e-7 on
    gradients of ~0.1 and adapters drawn from the global RNG it failed for 3 of 12 global seeds."""
    import lora
    from grpo import AGGREGATIONS, completion_logprobs
    model, tok = tiny
    scratch_adapter("mbt", seed=seed)
    rows = _rows() + [workflows.Turn("evaluator", "evaluator", [3, 3, 3, 3], [5, 6, 7, 8], [-1.0] * 4, "stop", "w")]
    lora.set_adapter(model, "mbt")
    with torch.no_grad():
        old = [lp - 0.2 for lp in completion_logprobs(model, [r.prompt_ids for r in rows],
                                                        [r.completion_ids for r in rows])[0]]

    class NoStep:  # keeps the gradient for inspection
        def zero_grad(self, set_to_none=True):
            for p in lora.adapter_parameters(model, "mbt"):
                p.grad = None

        def step(self):
            pass
    for mode in AGGREGATIONS:
        grads = []
        for budget in (10 ** 6, 9):
            args = train.parse_args(["--loss-agg", mode, "--token-budget", str(budget), "--grad-clip", "1e9"])
            stats = {**_stats(), "evaluator": _stats()["generator"]}
            train.optimizer_step(model, "mbt", rows, [1.0, -0.5, 2.0, -1.0], old, [None] * 4, NoStep(), args, stats)
            grads.append(torch.cat([p.grad.flatten() for p in lora.adapter_parameters(model, "mbt")]))
        close_grads(grads[1], grads[0])


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean", "role-balanced"])
def test_zero_advantage_rows_are_not_run_and_the_gradient_is_unchanged(tiny, scratch_adapter, monkeypatch, mode):
    """optimizer_step skips rows with advantage 0 (no KL): the gradient equals a by-hand loss over ALL
    rows, their weights included in the normalisation; only the other rows are forwarded. With a KL
    coefficient on the role they are run (the k3 term has a gradient); with every advantage 0 the
    gradient is zeros, not None, so AdamW still moves its moments as it did when every row ran."""
    import grpo
    import lora
    model, tok = tiny
    scratch_adapter("zadv", seed=3)
    rows = _rows() + [workflows.Turn("evaluator", "evaluator", [3, 3, 3, 3], [5, 6, 7, 8], [-1.0] * 4, "stop", "w"),
                      workflows.Turn("evaluator", "evaluator", [2, 3], [9, 6], [-1.0] * 2, "stop", "v")]
    adv = [1.0, 0.0, -0.5, 0.0, 2.0]
    lora.set_adapter(model, "zadv")
    params = lora.adapter_parameters(model, "zadv")
    with torch.no_grad():
        old = [lp - 0.3 for lp in grpo.completion_logprobs(model, [r.prompt_ids for r in rows],
                                                           [r.completion_ids for r in rows], 0.7)[0]]
    args = train.parse_args(["--loss-agg", mode, "--grad-clip", "1e9", "--temperature", "0.7"])
    for p in params:  # the reference: every row run, by hand
        p.grad = None
    weights, _ = grpo.token_weights([r.role for r in rows], [len(r.completion_ids) for r in rows], mode)
    lps = grpo.completion_logprobs(model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows], 0.7)[0]
    loss = sum(w * grpo.token_loss(lp, o, torch.full_like(lp, a))[0].sum() for w, lp, o, a in zip(weights, lps, old, adv))
    loss.backward()
    expected = torch.cat([p.grad.flatten() for p in params])
    forwarded = []
    real = grpo.completion_logprobs
    monkeypatch.setattr(train.grpo, "completion_logprobs", lambda m, prompts, *a, **k: (
        forwarded.append(len(prompts)), real(m, prompts, *a, **k))[1])

    class NoStep:
        def zero_grad(self, set_to_none=True):
            for p in params:
                p.grad = None

        def step(self):
            pass
    stats = {**_stats(), "evaluator": train.role_stats()}
    train.optimizer_step(model, "zadv", rows, adv, old, [None] * 5, NoStep(), args, stats)
    close_grads(torch.cat([p.grad.flatten() for p in params]), expected)
    assert sum(forwarded) == 3 and stats["generator"]["train_tokens"] == 2 + 2
    forwarded.clear()
    args = train.parse_args(["--loss-agg", mode, "--kl", "generator=0.1"])
    with torch.no_grad():
        ref = real(model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows])[0]
    train.optimizer_step(model, "zadv", rows, adv, old, ref, NoStep(), args, {**_stats(), "evaluator": train.role_stats()})
    assert sum(forwarded) == 4  # the generator's zero-advantage row runs: its KL term has a gradient
    forwarded.clear()
    train.optimizer_step(model, "zadv", rows, [0.0] * 5, old, [None] * 5, NoStep(),
                         train.parse_args(["--loss-agg", mode]), {**_stats(), "evaluator": train.role_stats()})
    assert forwarded == [] and all(p.grad is not None and not p.grad.any() for p in params)


@pytest.mark.parametrize("seed", [0, 1, 11])
def test_first_step_without_old_logprobs_equals_recomputed_ones(tiny, scratch_adapter, seed):
    """An adapter's only step in a batch takes its old log-probs from its own forward (None entries);
    with the separately recomputed ones (what train_step did before) the gradient is the same.
    Regression: fixed atol 1e-7 and global-RNG adapters, as the test above."""
    import lora
    from grpo import completion_logprobs
    model, tok = tiny
    scratch_adapter("once", seed=seed)
    rows = _rows()
    args = train.parse_args(["--grad-clip", "1e9"])
    lora.set_adapter(model, "once")
    with torch.no_grad():
        old = completion_logprobs(model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows],
                                  args.temperature)[0]
    opt = torch.optim.SGD(lora.adapter_parameters(model, "once"), lr=0.0)  # keeps the weights: compare grads
    grads = []
    for old_lp in (old, [None] * 3, [o - 1.0 for o in old]):  # the last: ratios e, clipped: must differ
        train.optimizer_step(model, "once", rows, [1.0, -1.0, 0.5], old_lp, [None] * 3, opt, args, _stats())
        grads.append(torch.cat([p.grad.flatten() for p in lora.adapter_parameters(model, "once")]))
    close_grads(grads[1], grads[0])
    assert (grads[2] - grads[0]).abs().max() > 0.01 * grads[0].abs().max()


def test_non_finite_loss_skips_steps_then_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(workflows.rewards, "grade", alternate_grade)  # each step has rows to run
    real = train.grpo.token_loss
    monkeypatch.setattr(train.grpo, "token_loss", lambda *a, **k: tuple(
        x * float("nan") if i == 0 else x for i, x in enumerate(real(*a, **k))))
    out = str(tmp_path / "run")
    with pytest.raises(SystemExit, match="non-finite"):
        train.main(["--workflow", "single", "--steps", "5", "--out", out, *SMALL])
    m = read_metrics(out)
    assert len(m) == 3 and all(x["skipped_steps"] == 1 for x in m)
    assert os.path.isdir(os.path.join(out, "step_000003"))


def refused(argv, capsys, message):
    """train.main(argv) stops as a bad command line does: exit code 2 and one line on stderr naming the
    problem (a SystemExit, so no traceback). Returns that line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, (e.value, err)
    return err


def snapshot(path):
    """Every file under `path` (or the file itself) with its bytes; None when nothing is there."""
    if os.path.isfile(path):
        return open(path, "rb").read()
    return {os.path.relpath(os.path.join(d, f), path): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(path) for f in files} if os.path.exists(path) else None


@pytest.mark.parametrize("argv,message", [
    (["--lr", "-1"], "--lr must be > 0, got -1.0"), (["--lr", "0"], "--lr must be > 0"),
    (["--lr", "nan"], "--lr must be > 0"),
    (["--save-every", "0"], "--save-every must be at least 1"), (["--save-every", "-5"], "--save-every must be at least 1"),
    (["--role-weights", "generator=0"], "--role-weights values must be > 0, got 0.0"),
    (["--role-weights", "generator=-1,evaluator=1"], "--role-weights values must be > 0"),
    (["--role-weights", "0"], "--role-weights values must be > 0"),
    (["--role-weights", "generatr=2"], "--role-weights: no role generatr in evalopt (its roles: generator, evaluator)"),
    (["--workflow", "voting", "--kl", "evaluator=0.05"], "--kl: no role evaluator in voting"),
    (["--kl", "-0.01"], "--kl values must be >= 0, got -0.01"), (["--kl", "evaluator=-1"], "--kl values must be >= 0"),
    (["--kl", "evaluator:0.1"], "role=number pairs"),
    (["--clip-low", "5"], "--clip-low must be in [0, 1), got 5.0"), (["--clip-low", "1"], "--clip-low must be in [0, 1)"),
    (["--clip-low", "-0.1"], "--clip-low must be in [0, 1)"), (["--clip-high", "-0.1"], "--clip-high must be at least 0"),
    (["--warmup", "-5"], "--warmup must be at least 0, got -5"),
    (["--group", "1"], "--group must be at least 2"), (["--problems", "0"], "--problems must be at least 1"),
    (["--temperature", "0"], "--temperature must be > 0"), (["--temperature", "-0.7"], "--temperature must be > 0"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"), (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    (["--voters", "0"], "--voters must be at least 1"), (["--rounds", "0"], "--rounds must be at least 1"),
    (["--steps", "0"], "--steps must be at least 1"), (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["--max-prompt-tokens", "0"], "--max-prompt-tokens must be at least 1"), (["--seed", "-1"], "--seed must be at least 0"),
    (["--lora-rank", "0"], "--lora-rank must be at least 1"), (["--lora-alpha", "0"], "--lora-alpha must be > 0"),
    (["--lora-dropout", "1"], "--lora-dropout must be in [0, 1)"), (["--weight-decay", "-1"], "--weight-decay must be"),
    (["--grad-clip", "0"], "--grad-clip must be > 0"), (["--dual-clip", "0.5"], "--dual-clip must be 0 (off) or > 1"),
    (["--dual-clip", "-3"], "--dual-clip must be 0 (off) or > 1"), (["--token-budget", "0"], "--token-budget must be"),
    (["--eval-every", "-1"], "--eval-every must be at least 0"), (["--eval-problems", "0"], "--eval-problems must be"),
    (["--sample-every", "-1"], "--sample-every must be at least 0"),
    (["--coherence", "1.5"], "--coherence takes lambdas in [0, 1], got '1.5'"),
    (["--coherence", "generator=1.5"], "--coherence takes lambdas in [0, 1]"),
    (["--coherence", "generator=-0.5"], "--coherence values must be >= 0"),
    (["--coherence", "judge=0.5"], "--coherence: no role judge in evalopt"),
    (["--coherence-window", "0"], "--coherence-window must be at least 1"),
    # infinities passed the range checks and crashed the sampler or trained nonsense (twenty-fifth session's review)
    (["--lr", "inf"], "--lr must be > 0, got inf"), (["--temperature", "inf"], "--temperature must be > 0, got inf"),
    (["--clip-high", "inf"], "--clip-high must be at least 0, got inf"), (["--dual-clip", "inf"], "--dual-clip must be"),
    (["--kl", "inf"], "--kl values must be >= 0, got inf"), (["--role-weights", "generator=inf"], "--role-weights values"),
    (["--workflow", "chain"], "argument --workflow: invalid choice: 'chain'"),
    (["--steps", "ten"], "argument --steps: invalid int value: 'ten'"),
])
def test_bad_flags_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    out = str(tmp_path / "run")
    refused([*argv, "--out", out], capsys, message)
    assert not os.path.exists(out)


def test_good_edge_values_are_accepted():
    """The checks refuse nonsense only: 0 where 0 means off or none, the ends of the ranges that are valid."""
    args = train.parse_args(["--dual-clip", "0", "--clip-low", "0", "--warmup", "0", "--kl", "0", "--seed", "0",
                             "--eval-every", "0", "--sample-every", "0", "--top-p", "1", "--weight-decay", "0",
                             "--lora-dropout", "0", "--group", "2", "--workflow", "voting", "--device", "cpu",
                             "--kl", "aggregator=0", "--role-weights", "generator=3,aggregator=0.5"])
    assert args.kl_coefs == {"aggregator": 0.0} and args.role_weight_map == {"generator": 3.0, "aggregator": 0.5}


def test_device_cuda_without_cuda_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU-only build, also on a GPU machine
    for device in ("cuda", "cuda:1"):
        refused(["--device", device, "--out", str(tmp_path / "run")], capsys, f"--device must be cpu (this torch "
                f"sees no GPU), got {device}")
    assert not os.path.exists(tmp_path / "run")


def test_bad_flag_in_a_real_process_has_no_traceback(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, os.path.join(root, "train.py"), "--lr", "-1", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert (p.returncode, p.stderr, p.stdout) == (2, "error: --lr must be > 0, got -1.0\n", "")
    assert os.listdir(tmp_path) == []  # no run folder, no runs/


def test_bad_files_and_run_dirs(tmp_path, capsys):
    refused([*SMALL, "--data", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "a")], capsys, "no such data file")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": \n')
    refused([*SMALL, "--data", str(bad), "--out", str(tmp_path / "b")], capsys, "bad.jsonl:2")
    refused(["--model", "./no-model-here", "--out", str(tmp_path / "c")], capsys, "no such model")
    (tmp_path / "a-file").write_text("")  # --out under a file: one line, not a traceback from makedirs
    refused([*SMALL, "--out", str(tmp_path / "a-file" / "run")], capsys,
            f"error: --out {tmp_path / 'a-file' / 'run'}: Not a directory")
    refused(["--out", str(tmp_path / "empty"), "--resume"], capsys, "--resume: no run in")
    refused(["--resume"], capsys, "--resume needs --out DIR")
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--steps", "1", "--out", out, *SMALL])
    before = snapshot(out)
    refused(["--workflow", "single", "--steps", "1", "--out", out, *SMALL], capsys, "already holds a run; pass --resume")
    assert snapshot(out) == before


def test_a_second_run_in_a_running_runs_folder_is_refused(tmp_path, capsys):
    """Regression: two train.py with one --out ran side by side, their metrics.jsonl lines interleaved and each
    overwriting the other's checkpoints and config.json, both exit 0. Rank 0 locks the folder (flock) until main
    ends: a second run is one line, exit 2, and writes nothing; once the first has ended the folder is free."""
    import fcntl
    (out := tmp_path / "run").mkdir()
    fcntl.flock(held := os.open(out, os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running train.py holds it
    try:
        refused(["--workflow", "single", "--steps", "1", "--out", str(out), *SMALL], capsys, "another train.py is running in it")
        assert os.listdir(out) == []
    finally:
        os.close(held)
    train.main(["--workflow", "single", "--steps", "1", "--out", str(out), *SMALL])
    train.main(["--out", str(out), "--resume", "--steps", "2"])  # the same process again: the first main let it go
    assert [x["step"] for x in read_metrics(str(out))] == [1, 2]


def test_a_truncated_model_file_and_an_unused_missing_eval_data_are_one_line(tmp_path, capsys):
    """Regression: a cut-off model.safetensors gave a 31-line SafetensorError traceback; a missing --eval-data was
    accepted without --eval-every (and eval.py --run failed on it later)."""
    models_mod = __import__("models")
    models_mod.build_tiny(folder := tmp_path / "model")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    refused(["--model", str(folder), "--device", "cpu", "--out", str(tmp_path / "a")], capsys, "a weights file is unreadable")
    refused([*SMALL, "--eval-data", str(tmp_path / "no.jsonl"), "--out", str(tmp_path / "b")], capsys, "no such data file")
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")


@pytest.mark.parametrize("flag,path,message", [
    ("--model", "no-model-here", "no such model folder or file: {path}"),
    ("--data", "missing.jsonl", "{path}: no such data file"),
    ("--eval-data", "missing.jsonl", "{path}: no such data file"),
    ("--init-adapters", "no-peft", "{path}/generator"),
])
def test_a_missing_model_data_or_adapter_path_is_exit_2_naming_it(tmp_path, capsys, flag, path, message):
    """Regression (README's leftovers): a missing --model or --data exited 1 (sys.exit with the message) while
    every other bad flag exits 2, argparse's code for a usage error. Now one line naming the path, exit 2, no
    run folder written."""
    path, out = str(tmp_path / path), str(tmp_path / "run")
    refused([*SMALL, "--workflow", "single", "--eval-every", "1", flag, path, "--out", out], capsys,
            message.format(path=path))
    assert not os.path.exists(out)


def test_a_missing_data_file_in_a_real_process_is_exit_2(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, os.path.join(root, "train.py"), *SMALL, "--data", "missing.jsonl", "--out", "run"],
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert (p.returncode, p.stderr, p.stdout) == (2, "error: missing.jsonl: no such data file\n", "")
    assert os.listdir(tmp_path) == []


def test_a_multi_line_loading_error_is_joined_into_one_line(tmp_path, capsys, monkeypatch):
    """transformers' OSError for a hub name it cannot find has two lines (the name, then a hint about tokens)."""
    def not_on_the_hub(spec, device=None):
        raise OSError(f"{spec} is not a local folder and is not a valid model identifier\nIf this is a private repository...")
    monkeypatch.setattr(train, "load_default_model", not_on_the_hub)
    refused(["--model", "someone/no-such-model", "--out", str(tmp_path / "run")], capsys,
            "error: someone/no-such-model is not a local folder and is not a valid model identifier If this is a private")
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("problems", [None, 4])
def test_problems_above_the_data_size_is_refused(tmp_path, capsys, problems):
    """Regression (README's leftovers): --problems above the data's size drew some problems twice in every step,
    and the copies' rollouts pooled into one larger GRPO group (keys are problem ids) without a word. Now one
    line saying how many problems the data has, exit 2, nothing written; the tiny model's default (4) counts
    too. As many problems as the data has is accepted."""
    data = tmp_path / "three.jsonl"
    data.write_text("".join(json.dumps({"question": f"{k} + 1?", "answer": f"#### {k + 1}"}) + "\n" for k in range(3)))
    i = SMALL.index("--problems")
    small = SMALL[:i] + SMALL[i + 2:] + (["--problems", str(problems)] if problems else [])  # None: the tiny default, 4
    out = str(tmp_path / "run")
    refused([*small, "--workflow", "single", "--data", str(data), "--out", out], capsys,
            "error: --problems 4: the data has 3 problems")
    assert not os.path.exists(out)
    train.main([*small, "--problems", "3", "--workflow", "single", "--steps", "1", "--data", str(data), "--out", out])
    assert [m["episodes"] for m in read_metrics(out)] == [3 * 2]  # 3 problems x --group 2


@pytest.mark.parametrize("when", ["importing", "loading the model"])
def test_ctrl_c_while_loading_is_one_line_and_exit_130(tmp_path, when):
    """Regression (README's leftovers): Ctrl-C before the first step (torch importing, the model loading)
    printed Python's traceback. Now one line and 130, the shell's code for Ctrl-C; nothing is written. The
    child presses Ctrl-C itself, as numpy starts to import or as the model starts to load."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    press = "os.kill(os.getpid(), signal.SIGINT)"
    child = "\n".join([
        "import os, runpy, signal, sys",
        "class CtrlCOnNumpy:",
        "    def find_spec(self, name, path=None, target=None):",
        f"        if name == 'numpy': {press}",
        "sys.meta_path.insert(0, CtrlCOnNumpy())" if when == "importing" else
        f"import models; models.load_model = lambda *a, **k: {press}",
        f"sys.argv = ['train.py', *{SMALL!r}, '--out', {str(tmp_path / 'run')!r}]",
        "runpy.run_path('train.py', run_name='__main__')"])
    p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=root)
    assert (p.returncode, p.stderr, p.stdout) == (130, "interrupted while loading; nothing lost\n", "")
    assert os.listdir(tmp_path) == []


def test_a_sigint_ignored_from_the_start_stays_ignored_while_loading(tmp_path):
    """What the fix must keep: a process started with SIGINT ignored (a background job of a script, nohup)
    is not made interruptible by train.py's loading handler; Python leaves an ignored SIGINT ignored."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = "\n".join([
        "import os, runpy, signal, sys",
        "signal.signal(signal.SIGINT, signal.SIG_IGN)",
        "import models; models.load_model = lambda *a, **k: (os.kill(os.getpid(), signal.SIGINT), sys.exit(7))",
        f"sys.argv = ['train.py', *{SMALL!r}, '--out', {str(tmp_path / 'run')!r}]",
        "runpy.run_path('train.py', run_name='__main__')"])
    p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=root)
    assert (p.returncode, p.stderr, p.stdout) == (7, "", "")  # the Ctrl-C ignored: on to the stand-in's exit 7


@pytest.mark.parametrize("what", ["file", "model config", "not json", "other files"])
def test_out_holding_something_else_is_refused_and_left_alone(tmp_path, capsys, what):
    """--out on a file, or on a folder that is not a run of train.py (an HF model folder's config.json, a
    config.json that is no JSON, any other files): refused, with or without --resume, and nothing changes."""
    out = tmp_path / "out"
    if what == "file":
        out.write_text("my notes\n")
    else:
        out.mkdir()
        (out / ("notes.txt" if what == "other files" else "config.json")).write_text(
            {"model config": json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}),
             "not json": "{oops", "other files": "my notes\n"}[what])
    before = snapshot(str(out))
    refused(["--workflow", "single", "--out", str(out), *SMALL], capsys,
            f"--out {out} is {'a file' if what == 'file' else 'a folder of something else'}: not a run of train.py")
    refused(["--out", str(out), "--resume"], capsys, f"--out {out} is")
    assert snapshot(str(out)) == before


# --------------------------------------------------------------------------- issue 18: resume you can trust

def test_resume_refuses_changed_flags_and_lists_them(tmp_path, capsys):
    """Regression: --resume trained on with the saved value of every flag but --steps (--lr 1e-3 at the
    old lr; --workflow evalopt on a Voting run resumed Voting). A flag given with another value is now an
    error naming each, also one given at its default (2e-05) when the run used another; flags given with
    the run's own values, and the safe ones (--steps, cadences), are accepted."""
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--steps", "1", "--lr", "1e-3", "--out", out, *SMALL])
    before = snapshot(out)
    err = refused(["--out", out, "--resume", "--steps", "2", "--lr", "2e-05", "--workflow", "voting"], capsys,
                  "--resume: ")
    assert f"{out} was trained with --workflow single (given: voting), --lr 0.001 (given: 2e-05); a resume may " \
           f"change only --steps, --save-every, --eval-every, --eval-problems, --sample-every, --token-budget" in err
    refused(["--out", out, "--resume", "--device", "cuda:0"], capsys, "--device cpu (given: cuda:0)")
    assert snapshot(out) == before
    train.main(["--out", out, "--resume", "--steps", "2", "--workflow", "single", "--lr", "1e-3", "--model", "tiny",
                "--save-every", "5", "--sample-every", "1"])  # the run's own values, and the safe flags changed
    config = json.load(open(os.path.join(out, "config.json")))
    assert (config["steps"], config["save_every"], config["sample_every"], config["lr"]) == (2, 5, 1, 1e-3)
    assert [x["step"] for x in read_metrics(out)] == [1, 2] and os.path.isdir(os.path.join(out, "step_000002"))


def test_resume_of_a_config_without_a_newer_flag_uses_its_default(tmp_path, capsys):
    """Regression: a flag added after a run was started broke its --resume (AttributeError on the old
    config.json). Now the flag takes its default and one line says so."""
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--steps", "1", "--out", out, *SMALL])
    path = os.path.join(out, "config.json")
    config = json.load(open(path))
    del config["dual_clip"], config["clip_high"]  # as if written before these flags existed
    json.dump(config, open(path, "w"))
    capsys.readouterr()
    train.main(["--out", out, "--resume", "--steps", "2"])
    notes = [line for line in capsys.readouterr().out.splitlines() if "predates" in line]
    assert notes == [f"note: {path} predates --clip-high 0.28, --dual-clip 3.0: using these defaults"]
    config = json.load(open(path))
    assert (config["dual_clip"], config["clip_high"]) == (3.0, 0.28) and len(read_metrics(out)) == 2


@pytest.mark.parametrize("rerun", ["--resume", "same command", "other flags"])
def test_run_stopped_before_its_first_checkpoint_starts_over(tmp_path, monkeypatch, capsys, rerun):
    """Regression: a run that crashed before its first checkpoint locked its folder (a rerun: "pass
    --resume"; --resume: "no checkpoint"). Now both start it over from step 0: --resume with its saved
    settings, a rerun with the flags given; its metrics and samples are replaced, not appended to."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    flags = ["--workflow", "single", "--steps", "2", "--save-every", "10", "--sample-every", "1", *SMALL]
    reference, out = str(tmp_path / "reference"), str(tmp_path / "run")
    train.main([*flags, "--out", reference])
    real_step = train.train_step
    monkeypatch.setattr(train, "train_step", lambda *a: real_step(*a) if a[-1] < 2 else 1 / 0)  # dies in step 2
    with pytest.raises(ZeroDivisionError):
        train.main([*flags, "--out", out])
    monkeypatch.setattr(train, "train_step", real_step)
    assert [x["step"] for x in read_metrics(out)] == [1] and train.checkpoints(out) == []
    capsys.readouterr()
    train.main({"--resume": ["--out", out, "--resume"], "same command": [*flags, "--out", out],
                "other flags": [*flags, "--steps", "1", "--out", out]}[rerun])
    assert f"note: {out} stopped before its first checkpoint: starting it over from step 0" in capsys.readouterr().out
    if rerun == "other flags":
        assert [x["step"] for x in read_metrics(out)] == [1] and train.checkpoints(out) == ["step_000001"]
    else:  # what an uninterrupted run writes
        assert strip_time(read_metrics(out)) == strip_time(read_metrics(reference))
        assert open(os.path.join(out, "samples.txt")).read() == open(os.path.join(reference, "samples.txt")).read()
        assert adapters_of(out, 2).keys() == adapters_of(reference, 2).keys()
        assert all(torch.equal(a, b) for a, b in zip(adapters_of(out, 2)["generator.safetensors"].values(),
                                                     adapters_of(reference, 2)["generator.safetensors"].values()))


@pytest.mark.parametrize("damage", ["state.pt", "generator.safetensors", "missing state.pt"])
def test_corrupt_checkpoint_on_resume_is_one_line(tmp_path, capsys, damage):
    out = str(tmp_path / "run")
    train.main(["--workflow", "single", "--steps", "1", "--out", out, *SMALL])
    path = os.path.join(out, "step_000001", damage.split()[-1])
    if damage.startswith("missing"):
        os.remove(path)
    else:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    before = snapshot(out)
    refused(["--out", out, "--resume", "--steps", "2"], capsys,
            f"error: --resume: cannot restore {os.path.join(out, 'step_000001')} (")
    assert snapshot(out) == before


def test_config_records_where_each_start_came_from(tmp_path):
    """config.json: per start (the first, then each resume) its step, the command line, the git commit
    (with -dirty for uncommitted changes; None outside a git checkout), the versions and the GPU."""
    import transformers
    out = str(tmp_path / "run")
    argv = ["--workflow", "single", "--steps", "1", "--out", out, *SMALL]
    train.main(argv)
    train.main(["--out", out, "--resume", "--steps", "2"])
    starts = json.load(open(os.path.join(out, "config.json")))["starts"]
    root = os.path.dirname(train.__file__)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    assert head and train.git_commit() == head + ("-dirty" if dirty else "")
    assert train.git_commit(str(tmp_path)) is None  # not a git checkout
    common = {"commit": train.git_commit(), "python": platform.python_version(), "torch": torch.__version__,
              "transformers": transformers.__version__, "gpu": "cpu", "ranks": 1}
    assert starts == [{"step": 0, "command": ["train.py", *argv], **common},
                      {"step": 1, "command": ["train.py", "--out", out, "--resume", "--steps", "2"], **common}]


def test_help_leads_with_the_common_flags(capsys):
    with pytest.raises(SystemExit) as e:
        train.parse_args(["--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0
    at = [text.index(f"\n  --{name}") for name in ("workflow", "policy", "task", "model", "steps", "out", "resume",
                                                    "data", "problems", "lr", "sample-every")]
    assert at == sorted(at)
    assert "--steps, --save-every, --eval-every, --eval-problems, --sample-every, --token-budget" in " ".join(text.split()).replace("- ", "-")  # argparse wraps at hyphens
    assert text.index("--sample-every") < text.index("Several GPUs") and text.index("torchrun") > at[-1]


def test_samples_show_each_turns_prompt(tiny):
    """samples.txt: each turn's prompt on one line, whitespace collapsed, a long one cut in the middle."""
    from models import chat_ids
    model, tok = tiny
    short, long = "Solve this.\n\nProblem: 2 + 2?", "Review it. " + " ".join(f"word{i}" for i in range(200)) + " THE END"
    turns = [workflows.Turn(role, role, chat_ids(tok, text), [5, 6], [0.0, 0.0], "stop", f"reply of {role}")
             for role, text in (("generator", short), ("evaluator", long))]
    import tempfile
    with tempfile.TemporaryDirectory() as out:
        train.write_sample(out, 1, workflows.Episode("p7", 0, turns=turns, final="", reward=1.0, status="correct"), tok)
        lines = open(os.path.join(out, "samples.txt")).read().splitlines()
    assert lines[0] == "=== step 1 problem p7 rollout 0 reward 1.0 (correct)"
    assert lines[1:4] == ["--- generator (generator, 2 tokens, stop)", "prompt: user Solve this. Problem: 2 + 2? "
                          "assistant", "reply of generator"]
    assert lines[5].startswith("prompt: user Review it. word0 word1") and lines[5].endswith("word199 THE END assistant")
    assert " [...] " in lines[5] and len(lines[5]) == len("prompt: ") + 400 + len(" [...] ") and "word100 " not in lines[5]


def test_micro_batches_count_prompt_tokens(tiny, monkeypatch):
    """Regression: micro-batches were sized by completion length only, so Eval-Opt rows with
    3,000-token histories packed ~40 rows into one 'budget' and ran out of GPU memory."""
    seen = []
    real = train.grpo.micro_batches
    monkeypatch.setattr(train.grpo, "micro_batches", lambda lengths, budget: seen.append(list(lengths)) or real(lengths, budget))
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    import tempfile
    with tempfile.TemporaryDirectory() as out:
        train.main(["--workflow", "single", "--steps", "1", "--out", out + "/r", *SMALL])
    # completions are at most 6 tokens (--max-new-tokens 6): longer rows prove prompts are counted
    assert any(seen) and all(min(lengths) > 6 for lengths in seen if lengths), seen  # [] where no row is selected


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_finishes_the_step_saves_and_resume_continues(tmp_path, monkeypatch, capsys, sig):
    """Ctrl-C, or SIGTERM (kill, timeout, a job scheduler; it lost every step since the last checkpoint): the
    step finishes, a checkpoint is saved and the exit code is 130 (it was 0, as for a finished run)."""
    import signal
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    real_step = train.train_step

    def interrupted_in_step_2(*a):
        if a[-1] == 2:
            os.kill(os.getpid(), getattr(signal, sig))  # as if the user pressed Ctrl-C during step 2, or kill ran
        return real_step(*a)
    monkeypatch.setattr(train, "train_step", interrupted_in_step_2)
    out = str(tmp_path / "run")
    with pytest.raises(SystemExit) as stopped:
        train.main(["--workflow", "single", "--steps", "4", "--save-every", "10", "--out", out, *SMALL])
    assert stopped.value.code == 130 and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert [x["step"] for x in read_metrics(out)] == [1, 2]
    assert os.path.isdir(os.path.join(out, "step_000002"))
    assert "--resume" in capsys.readouterr().out
    monkeypatch.setattr(train, "train_step", real_step)
    train.main(["--out", out, "--resume"])
    assert [x["step"] for x in read_metrics(out)] == [1, 2, 3, 4]


def test_second_ctrl_c_aborts_with_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C twice: the second aborts the step unsaved with one line and exit 130 (it printed a traceback); the last
    checkpoint stays, and --resume continues from it."""
    import signal
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    real_step = train.train_step

    def pressed_twice_in_step_3(*a):
        if a[-1] == 3:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(*a)
    monkeypatch.setattr(train, "train_step", pressed_twice_in_step_3)
    out = str(tmp_path / "run")
    try:
        train.main(["--workflow", "single", "--steps", "4", "--save-every", "2", "--out", out, *SMALL])
        code = "no exit"
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:  # what it did: a traceback (and here, pytest's own interruption)
        pytest.fail("the second Ctrl-C raised KeyboardInterrupt")
    err = capsys.readouterr().err  # with tqdm's bar
    assert code == 130 and "\nCtrl-C/SIGTERM again: stopped unsaved; --resume continues" in err and "Traceback" not in err
    assert train.checkpoints(out) == ["step_000002"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.setattr(train, "train_step", real_step)
    train.main(["--out", out, "--resume"])
    assert [x["step"] for x in read_metrics(out)] == [1, 2, 3, 4]


def test_eval_cadence_does_not_change_training(tmp_path, monkeypatch):
    """Regression: in-training evaluation drew from the training sampler's generator, so turning
    --eval-every on changed every later rollout."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    train.main(["--workflow", "single", "--steps", "3", "--out", a, *SMALL])
    train.main(["--workflow", "single", "--steps", "3", "--out", b, "--eval-every", "1", "--eval-problems", "2", *SMALL])
    mb = read_metrics(b)
    assert all("eval_accuracy" in x for x in mb)
    assert strip_time(read_metrics(a)) == [{k: v for k, v in x.items() if k != "eval_accuracy"} for x in strip_time(mb)]


def test_model_with_unknown_logit_post_processing_is_refused(tmp_path, monkeypatch, capsys):
    """A forward whose logits completion_logprobs cannot reproduce would train on wrong ratios: one-line error."""
    real = train.load_default_model

    def capped(*a):
        model, tok, used = real(*a)
        model.config.final_logit_softcapping = 2.0  # applied by output_head, ignored by Qwen3's forward
        return model, tok, used
    monkeypatch.setattr(train, "load_default_model", capped)
    refused(["--workflow", "single", "--steps", "1", "--out", str(tmp_path / "run"), *SMALL], capsys,
            "error: Qwen3ForCausalLM: its forward post-processes the logits")


# --------------------------------------------------------------------------- issue 14: read-outs that cannot mislead

def scripted_policy(reply):
    """Stands in for workflows.make_policy: every call of `role` answers reply(role), with real chat prompt ids."""
    from models import chat_ids

    def make(model, tok, adapters, **kw):
        def policy(role, texts):
            ids = tok.encode(reply(role), add_special_tokens=False)
            return [workflows.Turn(role, role, chat_ids(tok, t), ids, [0.0] * len(ids), "stop", reply(role)) for t in texts]
        return policy
    return make


def test_reward_hacking_monitor_in_metrics(tmp_path, monkeypatch):
    """Every voter answers infinity and the grader rewards everything: the monitor shows the collapse to one
    degenerate answer as numbers (the aggregator's turns are no answers: None)."""
    inf = r"The answer is \boxed{\infty}."
    monkeypatch.setattr(train, "make_policy", scripted_policy(lambda role: inf if role == "generator" else r"\boxed{2}"))
    monkeypatch.setattr(workflows.rewards, "grade", lambda texts, problems, **kw: [(1.0, "correct")] * len(texts))
    out = str(tmp_path / "run")
    train.main(["--workflow", "voting", "--policy", "ip", "--steps", "1", "--out", out, *SMALL])
    m = read_metrics(out)[0]
    assert m["answer_top_share"] == 1.0 and m["answer_top"] == workflows.rewards.final_answer(inf, "math")
    assert m["roles"]["generator"]["degenerate_rewarded"] == 1.0
    assert m["roles"]["aggregator"]["degenerate_rewarded"] is None


def test_grad_norm_and_loss_are_per_optimizer_step(tmp_path, monkeypatch):
    """Regression: per-role grad_norm and loss were summed over the role's optimizer steps, so per-instance
    voters (3 steps) logged ~3x what one merged step does. Now: the mean per step, and the max."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)
    real_token_loss, real_clip = train.grpo.token_loss, torch.nn.utils.clip_grad_norm_
    # a loss of exactly 1 per token (with a real gradient): each step's loss is sum(weights x tokens) = 1
    monkeypatch.setattr(train.grpo, "token_loss", lambda lp, *a, **k: (
        lambda loss, clipped, kl: (lp - lp.detach() + 1.0, clipped, kl))(*real_token_loss(lp, *a, **k)))
    norms = []  # the gradient norm of every optimizer step, in order (IP: one role's rows per step)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda ps, c: norms.append(float(real_clip(ps, c))) or
                        torch.tensor(norms[-1]))
    out = str(tmp_path / "run")
    train.main(["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance", "--steps", "1",
                "--out", out, *SMALL])
    g, a = read_metrics(out)[0]["roles"]["generator"], read_metrics(out)[0]["roles"]["aggregator"]
    assert g["optimizer_steps"] == 3 and len(norms) == 4  # voters 0, 1, 2, then the aggregator
    assert g["loss"] == pytest.approx(1.0) and a["loss"] == pytest.approx(1.0)  # the sum was 3.0
    assert g["grad_norm"] == pytest.approx(sum(norms[:3]) / 3, rel=1e-5)
    assert g["grad_norm_max"] == pytest.approx(max(norms[:3]), rel=1e-5) and max(norms[:3]) > min(norms[:3])
    assert a["grad_norm"] == pytest.approx(norms[3], rel=1e-5) == a["grad_norm_max"]
    assert g["grad_norms"] == pytest.approx(norms[:3], rel=1e-5) and a["grad_norms"] == pytest.approx(norms[3:], rel=1e-5)


def test_rows_run_per_optimizer_step(tmp_path, monkeypatch):
    """Each optimizer step's count of rows run is logged per role, in order (C5: how many rows each per-instance
    voter stepped on); rows with advantage 0 are not run, so the counts add up to the rows minus those."""
    # every answer to the first problem 0 (its group's advantages 0), to the second 0, 1, 0, 1, ... (the voters' answers
    # are graded; an episode's reward is its pick's)
    monkeypatch.setattr(workflows.rewards, "grade", lambda texts, problems, **kw: [
        (float(p != problems[0] and i % 2 == 1), "wrong") for i, p in enumerate(problems)])
    out = str(tmp_path / "run")
    train.main(["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance", "--steps", "1",
                "--out", out, *SMALL])
    m = read_metrics(out)[0]
    g, a = m["roles"]["generator"], m["roles"]["aggregator"]
    assert len(g["rows_run"]) == len(g["grad_norms"]) == 3 and len(a["rows_run"]) == 1
    assert m["zero_advantage_rows"] > 0 and min(g["rows_run"]) > 0
    assert sum(g["rows_run"]) + sum(a["rows_run"]) == m["rows"] - m["zero_advantage_rows"]  # no KL term


@pytest.mark.parametrize("shift", [0.0, 0.5])
def test_logprob_gap_is_sampler_minus_trainer(tmp_path, monkeypatch, shift):
    """logprob_gap: mean |sampler log-prob - trainer old log-prob| per role. On CPU in fp32 the two agree to
    1e-4; sampler log-probs shifted by 0.5 show as a gap of 0.5 (also for the recomputed ones: later voters)."""
    monkeypatch.setattr(workflows.rewards, "grade", fake_grade)

    def shifted(*a, **k):
        policy = workflows.make_policy(*a, **k)
        return lambda role, texts: [c and workflows.Turn(role, role, c.prompt_ids, c.completion_ids,
                                                         [x + shift for x in c.logprobs], c.finish, c.text)
                                    for c in policy(role, texts)]
    monkeypatch.setattr(train, "make_policy", shifted)
    out = str(tmp_path / "run")
    train.main(["--workflow", "voting", "--policy", "ip", "--steps", "2", "--lr", "1e-3", "--out", out, *SMALL])
    for m in read_metrics(out):
        for role in m["roles"].values():
            assert role["logprob_gap"] == pytest.approx(shift, abs=1e-4)


def test_lora_dropout_first_step_ratio_is_exactly_one(tmp_path, monkeypatch):
    """Regression: with --lora-dropout > 0 an adapter with several steps (per-instance voters) compared its
    dropout update with old log-probs recomputed without dropout, so its first step's ratio was not 1 once
    B != 0 (step 2). Now every adapter's first step takes its own forward's log-probs: ratio exactly 1."""
    monkeypatch.setattr(workflows.rewards, "grade", alternate_grade)
    gaps, real = [], train.grpo.token_loss
    monkeypatch.setattr(train.grpo, "token_loss", lambda lp, old, *a, **k: (
        gaps.append(float((lp.detach() - old).abs().max())), real(lp, old, *a, **k))[1])
    train.main(["--workflow", "voting", "--policy", "ip", "--parallel-steps", "per-instance", "--steps", "2",
                "--lr", "0.05", "--lora-dropout", "0.5", "--out", str(tmp_path / "run"), *SMALL])
    assert len(gaps) == 8  # per step: voters 0, 1, 2 (one micro-batch each), the aggregator
    assert [gaps[i] for i in (0, 3, 4, 7)] == [0.0] * 4  # each adapter's first step, both training steps
    assert gaps[5] > 1e-3  # a later voter step sees the policy changed by the first


def test_warmup_is_capped_at_a_quarter_of_the_steps(tmp_path, capsys):
    """Regression: --warmup 15 with 6 steps (every tiny run) never reached --lr (at most 6/15 of it)."""
    train.main(["--workflow", "single", "--steps", "1", "--out", str(tmp_path / "run"), *SMALL])
    assert "note: --warmup 15 capped at 0 steps" in capsys.readouterr().out
    assert read_metrics(str(tmp_path / "run"))[0]["lr"] == 2e-5  # 1 step: no warm-up, the set lr at once
    factors = lambda argv: [train.lr_factor(s, train.parse_args(argv)) for s in range(int(argv[1]))]
    # a tiny run: warm-up 1 step, then cosine from the set lr
    cosine = [0.5 * (1 + math.cos(math.pi * k / 5)) for k in range(5)]
    assert factors(["--steps", "6"]) == pytest.approx([1.0] + cosine)
    assert factors(["--steps", "8", "--warmup", "15"])[:3] == pytest.approx([0.5, 1.0, 1.0])
    reference = factors(["--steps", "200"])  # the reference's 15 of 200 steps: unchanged
    assert reference[:15] == pytest.approx([(s + 1) / 15 for s in range(15)]) and reference[15] == 1.0
    assert factors(["--steps", "24", "--warmup", "3"])[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])  # results.md's runs
    assert factors(["--steps", "3"]) == pytest.approx([1.0, 0.75, 0.25])  # no warm-up at all below 4 steps


# ---------------------------------------------------------------------------------------------
# by value or by direction: what one update, the schedule and the GRPO groups must be

def test_lr_schedule_by_hand():
    """Kills: cosine decay replaced by a linear one, no warm-up. --warmup 4 --steps 20: linear warm-up
    (step + 1) / 4, then 0.5 (1 + cos(pi (step - 4) / 16)); --no-cosine: flat 1 after warm-up."""
    args = train.parse_args(["--warmup", "4", "--steps", "20"])
    got = [train.lr_factor(step, args) for step in (0, 1, 3, 4, 8, 12, 16, 19)]
    c = lambda progress: 0.5 * (1 + math.cos(math.pi * progress))
    assert got == pytest.approx([0.25, 0.5, 1.0, 1.0, c(0.25), 0.5, c(0.75), c(15 / 16)])
    assert got[4] == pytest.approx(0.853553, abs=1e-6) and got[6] == pytest.approx(0.146447, abs=1e-6)
    flat = train.parse_args(["--warmup", "4", "--steps", "20", "--no-cosine"])
    assert [train.lr_factor(s, flat) for s in (1, 4, 12, 19)] == pytest.approx([0.5, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_one_update_moves_the_completion_in_the_direction_of_its_advantage(tiny, scratch_adapter, advantage):
    """Kills: the update using -advantage (every test comparing two runs of the same code passes with
    it). One SGD step of train.optimizer_step on one row: A = +1 must raise that completion's
    log-prob, A = -1 lower it (first order: by about lr * |gradient|^2, here far above float noise)."""
    import lora
    from grpo import completion_logprobs
    model, tok = tiny
    scratch_adapter("dir", std=0)  # a fresh adapter, B = 0: the gradient reaches B through A x
    lora.set_adapter(model, "dir")
    row = workflows.Turn("generator", "generator", [1, 2, 3, 4], [7, 8, 9], [-1.0] * 3, "stop", "x")
    total = lambda: completion_logprobs(model, [row.prompt_ids], [row.completion_ids])[0][0].sum().item()
    with torch.no_grad():
        before = total()
    opt = torch.optim.SGD(lora.adapter_parameters(model, "dir"), lr=0.05)
    args = train.parse_args(["--temperature", "1"])
    assert train.optimizer_step(model, "dir", [row], [advantage], [None], [None], opt, args, _stats())
    lora.set_adapter(model, "dir")
    with torch.no_grad():
        change = total() - before
    assert change * advantage > 1e-3, change


def scripted(reply):
    """A policy for train_step without the sampler: reply(role, text, k) -> completion text, k the
    text's position in its call (episode-major, as the workflows batch them). Token ids: one per
    character, small enough for the tiny model."""
    def policy(role, texts):
        out = []
        for k, text in enumerate(texts):
            r = reply(role, text, k)
            out.append(workflows.Turn(role, role, [1, 2, 3], [5 + (ord(ch) % 50) for ch in r], [-0.5] * len(r), "stop", r))
        return out
    return policy


def yes_grade(completions, problems, **kw):
    """Reward 1 for an answer containing YES (no prompt contains it)."""
    return [(float("YES" in c), "correct" if "YES" in c else "wrong") for c in completions]


def voting_reply(role, text, k):  # rollout 0 of each problem: every voter right; the aggregator picks 1
    return ("YES" if k // 3 % 2 == 0 else "no") if role == "generator" else "\\boxed{1}"


def orch_reply(role, text, k):
    if role == "orchestrator":  # rollout 0 of a problem plans two strategies, rollout 1 one
        return "STRATEGY 1: add\nSTRATEGY 2: count" if k % 2 == 0 else "STRATEGY 1: add"
    return "work" if role == "worker" else ("YES" if k % 2 == 0 else "no")


def evalopt_reply(role, text, k):
    """Rollout 0 answers right at once and is approved; rollout 1 is wrong three times, rejected each time."""
    if role == "generator":
        return ("YES" if k % 2 == 0 else "no") if "Attempt 1" not in text else "no again"
    return "\\boxed{Correct}" if "YES" in text else "\\boxed{Incorrect}"


S = 1 / math.sqrt(2)  # rewards (1, 0) in a group of two: advantages +-0.5 / std = +-1/sqrt(2)
GROUPS = {  # per workflow: instance -> (rows in the group of one problem, their advantages in order)
    "voting": (voting_reply, {"generator0": [S, -S], "generator1": [S, -S], "generator2": [S, -S],
                              "aggregator": [S, -S]}),
    # workers of both rollouts pool: rewards (1, 1, 0), mean 2/3, std sqrt(1/3)
    "orchworkers": (orch_reply, {"orchestrator": [S, -S], "synthesizer": [S, -S],
                                 "worker": [1 / 3 / math.sqrt(1 / 3)] * 2 + [-2 / 3 / math.sqrt(1 / 3)]}),
    # all attempts (and all reviews) of both rollouts pool: rewards (1, 0, 0, 0), mean 1/4, std 1/2
    "evalopt": (evalopt_reply, {"generator": [1.5, -0.5, -0.5, -0.5], "evaluator": [1.5, -0.5, -0.5, -0.5]}),
}


@pytest.mark.parametrize("workflow", list(GROUPS))
def test_grpo_groups_and_advantages_of_one_step(tiny, workflow, monkeypatch):
    """Which rows share a GRPO group, and the advantages they get, by hand (rollout 0 of each problem
    right, rollout 1 wrong). Kills: groups keyed by role instead of instance (Voting's voters pooled:
    then the advantages are +-0.913, not +-0.707), groups not split by problem, advantages of the
    wrong sign or not divided by their group's std."""
    reply, expect = GROUPS[workflow]
    model, tok = tiny
    monkeypatch.setattr(train, "policy_for", lambda *a: scripted(reply))
    monkeypatch.setattr(workflows.rewards, "grade", yes_grade)
    keys, updates = [], []
    real_adv = train.grpo.group_advantages
    monkeypatch.setattr(train.grpo, "group_advantages", lambda k, *a, **kw: keys.extend(k) or real_adv(k, *a, **kw))
    monkeypatch.setattr(train, "optimizer_step", lambda model, adapter, rows, adv, *a: updates.append(
        (adapter, rows, adv)) or True)
    args = train.parse_args(["--workflow", workflow, "--policy", "sp", "--group", "2", "--problems", "2"])
    problems = [{"id": f"p{j}", "task": "math", "prompt": f"problem {j}", "answer": "1"} for j in range(2)]
    opt = {"shared": torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)}
    metrics, episodes = train.train_step(model, tok, problems, args, opt, None, 1)
    assert [ep.reward for ep in episodes] == [1.0, 0.0, 1.0, 0.0]
    (adapter, rows, adv), = updates  # SP: one step over every row
    assert adapter == "shared" and len(rows) == len(keys) == sum(len(ep.turns) for ep in episodes)
    groups = {}
    for key, row, a in zip(keys, rows, adv):
        groups.setdefault(key, []).append(a)
    assert groups == {(p["id"], inst): pytest.approx(a, abs=1e-5) for p in problems for inst, a in expect.items()}
    assert metrics["singleton_groups"] == 0


def ip_step_updates(tiny, scratch_adapter, workflow, reply, monkeypatch, parallel_steps="per-instance"):
    """One IP train_step of 2 scripted episodes of one problem -> ([(adapter, rows) per optimizer step], episodes);
    the optimizer steps are recorded, not taken."""
    model, tok = tiny
    for seed, role in enumerate(workflows.WORKFLOWS[workflow].roles):
        scratch_adapter(role, seed=seed)
    monkeypatch.setattr(train, "policy_for", lambda *a: scripted(reply))
    monkeypatch.setattr(workflows.rewards, "grade", yes_grade)
    updates = []
    monkeypatch.setattr(train, "optimizer_step", lambda model, adapter, rows, *a: updates.append(
        (adapter, rows)) or True)
    args = train.parse_args(["--workflow", workflow, "--policy", "ip", "--group", "2", "--problems", "1",
                             "--parallel-steps", parallel_steps])
    opt = {r: torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0) for r in workflows.WORKFLOWS[workflow].roles}
    _, episodes = train.train_step(model, tok, [{"id": "p", "task": "math", "prompt": "q", "answer": "1"}],
                                   args, opt, None, 1)
    return updates, episodes


@pytest.mark.parametrize("workflow,reply,steps", [
    ("voting", voting_reply, [("generator", {"generator0"}), ("generator", {"generator1"}),
                              ("generator", {"generator2"}), ("aggregator", {"aggregator"})]),
    ("orchworkers", orch_reply, [("orchestrator", {"orchestrator"}), ("worker", {0}), ("worker", {1}),
                                 ("synthesizer", {"synthesizer"})]),
])
def test_ip_per_instance_steps_hold_only_their_role_and_instance(tiny, scratch_adapter, workflow, reply, steps,
                                                                 monkeypatch):
    """Under IP each optimizer step holds one adapter's rows, and under --parallel-steps per-instance
    only one instance of it (voter k; the k-th worker of each episode). Kills: an IP step taking other
    roles' rows, per-instance steps merged or split on the wrong index."""
    updates, episodes = ip_step_updates(tiny, scratch_adapter, workflow, reply, monkeypatch)
    slot = lambda row: next(j - 1 for ep in episodes for j, t in enumerate(ep.turns) if t is row)  # after the orchestrator
    got = [(adapter, {r.instance if workflow == "voting" or r.role != "worker" else slot(r) for r in rows})
           for adapter, rows in updates]
    assert got == steps
    assert all(r.role == adapter for adapter, rows in updates for r in rows)
    # every row is in exactly one step
    assert sorted(id(r) for _, rows in updates for r in rows) == sorted(id(t) for ep in episodes for t in ep.turns)


@pytest.mark.parametrize("workflow,reply", [("voting", voting_reply), ("orchworkers", orch_reply)])
def test_minibatch_steps_cut_a_parallel_roles_rows_in_order(tiny, scratch_adapter, workflow, reply, monkeypatch):
    """--parallel-steps minibatch (the reference's cut): a parallel role's rows, in episode order, in steps of the
    step's episode count (here 2): Voting 6 voter rows -> 3 steps of 2 (across voters and episodes); Orch-Workers 3
    worker rows (2 in episode 0, 1 in episode 1) -> episode 0's two, then episode 1's one, where per-instance gives
    the first workers of both episodes, then episode 0's second. The other roles keep one step each."""
    updates, episodes = ip_step_updates(tiny, scratch_adapter, workflow, reply, monkeypatch, "minibatch")
    for role in workflows.WORKFLOWS[workflow].roles:
        mine = [t for ep in episodes for t in ep.turns if t.role == role]
        want = [mine[k:k + 2] for k in range(0, len(mine), 2)] if role in workflows.WORKFLOWS[workflow].parallel \
            else [mine]
        assert [[id(r) for r in rows] for adapter, rows in updates if adapter == role] == \
            [[id(r) for r in chunk] for chunk in want]
    assert [len(rows) for adapter, rows in updates if adapter in ("generator", "worker")] == \
        ([2, 2, 2] if workflow == "voting" else [2, 1])
