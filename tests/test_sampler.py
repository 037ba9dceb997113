"""Sampler against trusted references: model.generate for greedy tokens, one full forward pass
for log-probs; plus seeding, stop handling, lengths and padding."""
import contextlib
import os
import shutil
import subprocess
import sys

import pytest
import torch

from models import chat_ids, stop_ids
from sampler import sample

TEXTS = ["hi", "Solve 3+4 please, step by step.", "def f(x): return", "How many eggs?"]


def prompts(tok):
    return [chat_ids(tok, t) for t in TEXTS]  # lengths differ, so rows are left-padded


def generate_greedy(model, tok, ps, n, max_new, eos):
    L = max(map(len, ps))
    rows = [p for p in ps for _ in range(n)]
    ids = torch.tensor([[tok.pad_token_id] * (L - len(p)) + p for p in rows])
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in rows])
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                         eos_token_id=eos, pad_token_id=tok.pad_token_id)
    result = []
    for row in out[:, L:].tolist():
        for j, t in enumerate(row):  # generate pads finished rows; cut after the first stop
            if t in eos:
                row = row[:j + 1]
                break
        result.append(row)
    return result


def test_greedy_matches_generate_on_mixed_lengths(tiny):
    model, tok = tiny
    ps = prompts(tok)
    # token 125 appears in some rows of this random model's greedy output: as a stop id it makes some
    # rows stop early, so the batch is compacted mid-way.
    eos = sorted(set(stop_ids(model, tok)) | {125, tok.pad_token_id})
    ours = sample(model, ps, n=2, max_new_tokens=30, temperature=0, stop_ids=eos,
                  pad_id=tok.pad_token_id)
    ref = generate_greedy(model, tok, ps, 2, 30, eos)
    assert [c.tokens for c in ours] == ref
    assert {c.finish for c in ours} == {"stop", "length"}  # both paths exercised
    assert [c.prompt_index for c in ours] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_logprobs_equal_full_forward(tiny):
    model, tok = tiny
    ps = prompts(tok)
    g = torch.Generator().manual_seed(1)
    T = 0.7
    outs = sample(model, ps, n=2, max_new_tokens=20, temperature=T, top_p=0.9, top_k=50,
                  stop_ids=stop_ids(model, tok), pad_id=tok.pad_token_id, generator=g)
    for c in outs:
        p = ps[c.prompt_index]
        ids = torch.tensor([p + c.tokens])
        logits = model(input_ids=ids).logits[0, len(p) - 1:-1].float() / T
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.tokens)[:, None])[:, 0]
        # tolerance: fp32, batched-with-padding vs single-row kernels differ in the last bits
        torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_same_seed_same_samples(tiny):
    model, tok = tiny
    kw = dict(n=3, max_new_tokens=15, temperature=1.0, pad_id=tok.pad_token_id)
    a = sample(model, prompts(tok), generator=torch.Generator().manual_seed(7), **kw)
    b = sample(model, prompts(tok), generator=torch.Generator().manual_seed(7), **kw)
    c = sample(model, prompts(tok), generator=torch.Generator().manual_seed(8), **kw)
    assert [x.tokens for x in a] == [x.tokens for x in b]
    assert [x.tokens for x in a] != [x.tokens for x in c]
    assert len({tuple(x.tokens) for x in a}) > 1  # the n samples of one prompt differ


def test_stops_lengths_and_no_padding_inside(tiny):
    model, tok = tiny
    eos = [63, 125]
    outs = sample(model, prompts(tok), n=4, max_new_tokens=12, temperature=1.0, stop_ids=eos,
                  pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    assert len(outs) == 16
    for c in outs:
        assert 1 <= len(c.tokens) == len(c.logprobs) <= 12
        assert not any(t in eos + [tok.pad_token_id] for t in c.tokens[:-1])
        if c.finish == "stop":
            assert c.tokens[-1] in eos + [tok.pad_token_id]
        else:
            assert c.finish == "length" and len(c.tokens) == 12
        assert all(lp <= 0 for lp in c.logprobs)


def test_min_new_tokens_forces_length_and_top_k_1_is_greedy(tiny):
    model, tok = tiny
    outs = sample(model, prompts(tok), max_new_tokens=10, temperature=0, stop_ids=[63, 125],
                  pad_id=tok.pad_token_id, min_new_tokens=10)
    assert all(len(c.tokens) == 10 for c in outs)
    greedy = sample(model, prompts(tok), max_new_tokens=10, temperature=0, pad_id=tok.pad_token_id)
    top1 = sample(model, prompts(tok), max_new_tokens=10, temperature=0.7, top_k=1,
                  pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    assert [c.tokens for c in greedy] == [c.tokens for c in top1]
    top_p0 = sample(model, prompts(tok), max_new_tokens=10, temperature=0.7, top_p=0.0,
                    pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    assert [c.tokens for c in greedy] == [c.tokens for c in top_p0]


def test_top_p_and_top_k_truncate_at_non_degenerate_values():
    """sampler.pick on one 4-token distribution (0.5, 0.3, 0.15, 0.05), 20000 draws per setting: the
    drawn tokens' frequencies against the truncated, renormalised distribution worked out by hand
    (sampling noise: sd <= 0.0036 per frequency). Kills: top-p dropping the token whose probability
    crosses p (top_p 0.7 must keep tokens 0 and 1: 0.5 < 0.7 <= 0.8), top-k dropping the k-th token,
    truncation before the temperature, log-probs of the truncated distribution (the returned log-prob
    is always log_softmax(logits / T) of the full vocabulary, as the trainer recomputes it)."""
    from sampler import pick
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(20000, 1)
    at_2 = probs.sqrt() / probs.sqrt().sum()  # T = 2: p^(1/2) renormalised = 0.379, 0.294, 0.207, 0.120
    cases = [  # (temperature, top_k, top_p, expected frequencies)
        (1.0, 0, 0.7, torch.tensor([0.5, 0.3, 0, 0]) / 0.8),
        (1.0, 0, 0.85, torch.tensor([0.5, 0.3, 0.15, 0]) / 0.95),
        (1.0, 2, 1.0, torch.tensor([0.5, 0.3, 0, 0]) / 0.8),
        (1.0, 3, 0.7, torch.tensor([0.5, 0.3, 0, 0]) / 0.8),
        (2.0, 0, 0.7, torch.cat([at_2[:3], torch.zeros(1)]) / at_2[:3].sum()),  # 0.379 + 0.294 < 0.7
        (2.0, 3, 1.0, torch.cat([at_2[:3], torch.zeros(1)]) / at_2[:3].sum()),
    ]
    for T, k, p, expected in cases:
        tokens, logprobs = pick(logits, T, k, p, torch.Generator().manual_seed(0))
        freq = torch.bincount(tokens, minlength=4) / len(tokens)
        assert (freq[expected == 0] == 0).all(), (T, k, p, freq)
        torch.testing.assert_close(freq, expected, atol=0.015, rtol=0, msg=f"T={T} top_k={k} top_p={p}")
        torch.testing.assert_close(logprobs, torch.log_softmax(logits / T, -1).gather(-1, tokens[:, None])[:, 0])


def test_empty_prompt_list_and_empty_prompt(tiny):
    model, tok = tiny
    assert sample(model, [], pad_id=tok.pad_token_id) == []
    try:
        sample(model, [[]], pad_id=tok.pad_token_id)
        raise AssertionError("an empty prompt must be rejected")
    except ValueError as e:
        assert "empty prompt" in str(e)


# ---------------------------------------------------------------------------------- fast path

@pytest.mark.parametrize("fused", [False, pytest.param(True, marks=pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")), reason="torch.compile on CPU needs a C++ compiler"))])
def test_fast_path_matches_simple_path_greedy_with_compaction(tiny, fused):
    """fused: bench/sampler.py's fused_layers contender (torch.compile'd norms, MLPs and rotary; inductor's C++
    backend on CPU, ~10 s) must give the same tokens too, and leave no patched forward or rotary behind."""
    import inspect
    from bench.sampler import fused_layers
    from sampler import sample_fast
    model, tok = tiny
    rope = inspect.getmodule(type(model)).apply_rotary_pos_emb
    eos = sorted(set(stop_ids(model, tok)) | {125})
    ref = sample(model, prompts(tok), n=2, max_new_tokens=30, temperature=0, stop_ids=eos,
                 pad_id=tok.pad_token_id)
    # check_every=4: the host looks every 4 tokens, so finished rows are compacted away mid-way; tail_slots 0:
    # windows grown bucket by bucket to the end, else the whole cache once at most 4 rows are left
    for tail_slots in (0, 4 * (max(map(len, prompts(tok))) + 30)):
        with fused_layers(model) if fused else contextlib.nullcontext():
            fast = sample_fast(model, prompts(tok), n=2, max_new_tokens=30, temperature=0, stop_ids=eos,
                               pad_id=tok.pad_token_id, cuda_graph=False, check_every=4, bucket=8,
                               prefill_tokens=4 * 40, tail_slots=tail_slots)  # prefill in chunks of ~4 rows
        assert [c.tokens for c in fast] == [c.tokens for c in ref]
        assert [c.finish for c in fast] == [c.finish for c in ref]
        for a, b in zip(fast, ref):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
    assert model.config._attn_implementation == "sdpa"  # restored after the call
    assert not any("forward" in vars(m) for m in model.modules())
    assert inspect.getmodule(type(model)).apply_rotary_pos_emb is rope


def test_fast_path_samples_from_the_same_distribution(tiny):
    """First-token frequencies over 4000 draws vs the exact softmax(logits / T): the total variation
    distance is 0.06 from sampling noise alone (seeded); sampling at T=1 instead gives 0.38."""
    from sampler import sample_fast
    model, tok = tiny
    p = chat_ids(tok, "Solve 3+4 please, step by step.")
    T = 0.6
    probs = torch.softmax(model(input_ids=torch.tensor([p])).logits[0, -1].float() / T, -1)
    for fn, kw in [(sample, {}), (sample_fast, {"cuda_graph": False})]:
        outs = fn(model, [p], n=4000, max_new_tokens=1, temperature=T, pad_id=tok.pad_token_id,
                  generator=torch.Generator().manual_seed(0), **kw)
        freq = torch.bincount(torch.tensor([c.tokens[0] for c in outs]), minlength=len(probs)) / 4000
        assert 0.5 * (freq - probs).abs().sum() < 0.08, fn.__name__


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fast_path_with_cuda_graph_matches_simple_path_on_gpu():
    from models import load_model
    from sampler import sample_fast
    model, tok = load_model("tiny", device="cuda", dtype=torch.float32)  # fp32: no bf16 ties
    eos = sorted(set(stop_ids(model, tok)) | {125})
    ps = prompts(tok) * 8
    ref = sample(model, ps, n=2, max_new_tokens=40, temperature=0, stop_ids=eos,
                 pad_id=tok.pad_token_id, fast=False)
    # small buckets and frequent checks: several graphs (new lengths, compacted batches) per call
    from bench.sampler import fused_layers
    # fused True: bench/sampler.py's contender; tail_slots 0: a new graph per bucket to the end
    for fused, tail_slots in ((False, 0), (False, 2**12), (True, 2**12)):
        with fused_layers(model) if fused else contextlib.nullcontext():
            fast = sample_fast(model, ps, n=2, max_new_tokens=40, temperature=0, stop_ids=eos,
                               pad_id=tok.pad_token_id, check_every=4, bucket=16, tail_slots=tail_slots)
        assert [c.tokens for c in fast] == [c.tokens for c in ref], (fused, tail_slots)
        for a, b in zip(fast, ref):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_thousands_of_captures_in_one_process_under_expandable_segments():
    """A new memory pool per capture (and a new stream per call) reserved new address space each time under
    expandable segments: training died after ~35 Voting steps (docs/results.md). 3,000 captures in one process
    now, each call giving the first call's greedy tokens."""
    code = "\n".join([
        "import torch, sampler", "from models import load_model",
        "model, tok = load_model('tiny', device='cuda', dtype=torch.float32)",
        "n, begin, first = [0], torch.cuda.CUDAGraph.capture_begin, None",
        "torch.cuda.CUDAGraph.capture_begin = lambda self, *a: (n.__setitem__(0, n[0] + 1), begin(self, *a))[1]",
        "while n[0] < 3000:",
        "    out = [c.tokens for c in sampler.sample_fast(model, [[1, 2, 3]] * 4, n=2, max_new_tokens=64,",
        "        temperature=0, pad_id=0, check_every=4, bucket=8, tail_slots=0)]",
        "    assert out == (first := first or out)",
        "print(n[0], 'captures;', torch.cuda.memory_reserved() >> 20, 'MiB reserved')"])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr[-3000:]
    print(r.stdout)


def _fused_available():
    import sampler
    return sampler.triton is not None and (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1")


@pytest.mark.skipif(not _fused_available(), reason="needs Triton on CUDA (or TRITON_INTERPRET=1)")
def test_draw_fused_matches_pick():
    """The one-kernel draw against the PyTorch path's `pick`: greedy tokens and log-probs equal on bf16
    logits whose vocabulary is not a multiple of the kernel's block; samples follow softmax(logits / T)
    (total variation from noise alone at 20000 draws: about 0.004, at most 0.009 over 200 seeds;
    T=1 instead of 0.7 gives 0.137); three equal favourites at the same column of three different
    blocks are drawn equally often (noise shared between blocks would favour the first); the same
    seed repeats, another does not."""
    from sampler import draw_fused, pick
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(5, 5000, generator=g) * 3).to(torch.bfloat16).to(device)
    logits[1, 4999] = 30  # the last column of the partial block
    logits[3, 17] = float("-inf")
    tok, lp = draw_fused(logits, 0, seed=1)
    ref_tok, ref_lp = pick(logits.float(), 0, 0, 1.0, None)
    assert tok.tolist() == ref_tok.tolist() and tok[1] == 4999
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=0)
    small = torch.tensor([1.0, 0.5, -1.0, 2.0, 0.0, float("-inf")], device=device)
    rows = small.repeat(20000, 1)
    T = 0.7
    tok, lp = draw_fused(rows, T, seed=123)
    probs = torch.softmax(small / T, -1)
    freq = torch.bincount(tok, minlength=6).float() / len(tok)
    assert 0.5 * (freq - probs).abs().sum() < 0.015 and freq[5] == 0
    torch.testing.assert_close(lp, torch.log_softmax(small / T, -1)[tok], atol=1e-5, rtol=0)
    assert draw_fused(rows[:64], T, seed=123)[0].tolist() == tok[:64].tolist()
    assert draw_fused(rows[:64], T, seed=124)[0].tolist() != tok[:64].tolist()
    wide = torch.zeros(3000, 9000, device=device)  # blocks of 4096: columns 5, 4101, 8197 line up
    wide[:, [5, 4101, 8197]] = 10.0
    share = torch.bincount(draw_fused(wide, T, seed=7)[0], minlength=9000)[[5, 4101, 8197]] / 3000
    assert share.sum() > 0.98 and share.min() > 0.29 and share.max() < 0.38  # 1/3 each, sd 0.009


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fast_path_on_gpu_samples_from_the_same_distribution():
    from models import load_model
    model, tok = load_model("tiny", device="cuda", dtype=torch.float32)
    p = chat_ids(tok, "Solve 3+4 please, step by step.")
    T = 0.6
    probs = torch.softmax(model(input_ids=torch.tensor([p], device="cuda")).logits[0, -1].float() / T, -1)
    outs = sample(model, [p], n=4000, max_new_tokens=2, temperature=T, pad_id=tok.pad_token_id,
                  generator=torch.Generator(device="cuda").manual_seed(0))
    freq = torch.bincount(torch.tensor([c.tokens[0] for c in outs]), minlength=len(probs)) / 4000
    assert 0.5 * (freq.cuda() - probs).abs().sum() < 0.08
    import sampler  # every decode step keys its noise with a seed of its own
    seeds, real = [], sampler.draw_fused
    sampler.draw_fused = lambda logits, t, seed: (seeds.append(seed), real(logits, t, seed))[1]
    try:
        sample(model, [p], n=8, max_new_tokens=20, min_new_tokens=20, temperature=T, pad_id=tok.pad_token_id)
    finally:
        sampler.draw_fused = real
    assert len(seeds) == 20 and len(set(seeds)) == 20


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_breakdown_parts_add_up_and_counts_fit_the_loop(tiny, device):
    """bench/breakdown.py (issue 15) on the tiny model: in every instrumented call each part is >= 0 and setup +
    parts + bookkeeping + tail is the call's total; the counts fit sample_fast's loop (a prefill forward first;
    every draw but the last is followed by one decode forward: eager on CPU, else the call's one warm-up
    (before its first capture) or a replay; long-stop's rows all stop at their first token, so the loop ends at the first host check); an
    instrumented call returns what a plain call of the same prompts does; no wrapper is left behind."""
    import sampler
    from bench import breakdown
    from models import load_model
    model, tok = tiny if device == "cpu" else load_model("tiny", device="cuda")
    originals = (sampler.draw_fused, sampler.pick, sampler.StaticKV.keep, torch.cuda.graph, torch.cuda.CUDAGraph.replay)
    args = breakdown.parse(["--model", "tiny", "--check-every", "8", "5", "--new-tokens", "12", "--long-rows", "3",
                            "--long-len", "60", "90", "--prompts", "2", "--n", "2"])
    results = breakdown.report(model, tok, args)
    assert set(results) == set(breakdown.WORKLOADS)
    for workload, records in results.items():
        same_call = [records["warm-up"], records["8: plain, the warm-up's prompts"],
                     records["8: instrumented, the warm-up's prompts"]]  # check_every 8 (the first value) in each
        assert same_call[0]["completions"] == same_call[1]["completions"] == same_call[2]["completions"]
        for key, r in records.items():
            if "instrumented" not in key:
                continue
            parts, counts = r["parts"], r["counts"]
            assert min(parts.values()) >= 0 and r["bookkeeping_before_first_draw"] >= 0
            assert sum(parts.values()) == pytest.approx(r["total"], abs=1e-6)
            assert counts["prefill"] >= 1 and counts["compaction"] >= 0
            decode = (counts["eager decode"] if device == "cpu" else counts["warm-up"] + counts["replay"])
            # one warm-up (the call's first capture); a later capture's step is that graph's first replay
            assert counts["draw"] == decode + 1 and counts["warm-up"] == min(1, counts["capture"])
            if device == "cpu":
                assert counts["warm-up"] == counts["replay"] == 0
            else:
                assert counts["eager decode"] == 0 and counts["capture"] >= min(1, decode)  # long-stop: none
            if workload == "long-stop":
                assert r["max_len"] == 1 and counts["draw"] == 1  # the host also checks after 1, 2, 4, ... tokens
            if workload == "long-2":
                assert counts["draw"] == r["max_len"] == 2
    eos = sorted(set(stop_ids(model, tok)) | {125, tok.pad_token_id})  # greedy on CPU: 4 of 8 rows stop by token 22
    kw = dict(n=2, max_new_tokens=30, stops=eos, pad_id=tok.pad_token_id, temperature=0, check_every=4)
    plain, timed = (breakdown.one_call(model, prompts(tok), instrument=i, **kw) for i in (False, True))
    assert timed["completions"] == plain["completions"]
    if device == "cpu":  # the compaction is timed (bf16 on a GPU may stop other rows)
        assert timed["counts"]["compaction"] == 1
    assert sum(timed["parts"].values()) == pytest.approx(timed["total"], abs=1e-6)
    assert "forward" not in vars(model) and "forward" not in vars(model.get_decoder())
    assert originals == (sampler.draw_fused, sampler.pick, sampler.StaticKV.keep, torch.cuda.graph,
                         torch.cuda.CUDAGraph.replay)


def test_breakdown_lora_runs_every_call_through_the_wrappers(capsys, monkeypatch):
    """breakdown.py --lora: the calls go through LoRA wrappers (as training's rollouts, under lora.merged)."""
    import lora
    from bench import breakdown
    calls, forward = [], lora.LoRALinear.forward
    monkeypatch.setattr(lora.LoRALinear, "forward", lambda self, x: (calls.append(self.active), forward(self, x))[1])
    breakdown.main(["--model", "tiny", "--lora", "4", "--workloads", "natural", "--check-every", "8",
                    "--new-tokens", "8", "--prompts", "2", "--n", "2"])
    assert "LoRA wrappers on: an adapter of rank 4" in capsys.readouterr().out
    assert calls and set(calls) == {None}  # merged: the adapter folded into the weights, the wrapper passes through
    with pytest.raises(SystemExit):
        breakdown.parse(["--lora", "-1"])


def test_sdpa_bench_switches_cudnn_attention_and_runs_the_script(tmp_path):
    """bench/sdpa.py (issue 15's A/B of cuDNN attention): `on|off SCRIPT ARGS` runs SCRIPT as __main__ with its own
    argv and cuDNN attention allowed or disabled (a setting CPU builds keep too), also after SCRIPT loads a model
    (load_model turns it off); `probe` measures on a GPU only."""
    script, out = tmp_path / "show.py", tmp_path / "out.txt"
    script.write_text("import sys, torch\nfrom models import load_default_model\nload_default_model('tiny', 'cpu')\n"
                      "open(sys.argv[1], 'a').write(f'{sys.argv} {torch.backends.cuda.cudnn_sdp_enabled()}\\n')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, os.path.join(root, "bench", "sdpa.py"), "off", str(script), str(out)], check=True)
    from bench import sdpa
    import models
    argv, path, was, load = sys.argv, list(sys.path), torch.backends.cuda.cudnn_sdp_enabled(), models.load_model
    try:
        torch.backends.cuda.enable_cudnn_sdp(False)  # "on" must switch it on, not find it on
        sdpa.main(["on", str(script), str(out)])
    finally:
        sys.argv, sys.path[:], models.load_model = argv, path, load
        torch.backends.cuda.enable_cudnn_sdp(was)
    assert out.read_text().splitlines() == [f"['{script}', '{out}'] False", f"['{script}', '{out}'] True"]
    if torch.cuda.is_available():  # on the GPU machine: the probe runs through (its numbers are for docs/benchmarks.md)
        try:
            torch.backends.cuda.enable_cudnn_sdp(False)
            sdpa.probe(14, 2, 64)
            assert not torch.backends.cuda.cudnn_sdp_enabled()  # left as it found it
            sdpa.decode_compare(14, 2, 64, rows=(8,), lengths=(256,))  # the contender's timing runs through
            assert not torch.backends.cuda.cudnn_sdp_enabled()
        finally:
            torch.backends.cuda.enable_cudnn_sdp(was)


@pytest.mark.parametrize("B,H,Hkv,q,L,D", [(3, 14, 2, 1, 37, 64), (2, 12, 2, 1, 50, 128), (2, 4, 4, 1, 9, 16),
                                            (2, 14, 2, 3, 20, 64)])
def test_decode_attention_equals_attention_written_out(B, H, Hkv, q, L, D):
    """sampler.gqa_attention (two batched matmuls, issue 15) and bench/sdpa.py's sdpa_attention (the SDPA contender,
    the sampler's until the twenty-third session) both give attention written out per head in fp32: grouped query
    heads (HF's repeat_kv order), a mask with holes, keys and values read from a longer cache, one query or several."""
    import sampler
    from bench.sdpa import sdpa_attention
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(B * L)
    query = torch.randn(B, H, q, D, generator=g).to(device)
    key, value = (torch.randn(B, Hkv, L + 5, D, generator=g).to(device)[:, :, :L] for _ in range(2))
    mask = (torch.rand(B, 1, q, L, generator=g) > 0.3).to(device)
    mask[..., 0] = True
    k, v = (x.repeat_interleave(H // Hkv, 1) for x in (key, value))  # query head h reads key/value head h // G
    for scale in (0.3, None):  # None: 1 / sqrt(D), as HF passes no scaling
        scores = (query @ k.transpose(-1, -2) * (scale or D ** -0.5)).masked_fill(~mask, float("-inf"))
        want = (scores.softmax(-1) @ v).transpose(1, 2)
        for fn in (sampler.gqa_attention, sdpa_attention):
            got = fn(None, query, key, value, mask, scale)[0]
            assert got.shape == want.shape == (B, q, H, D)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        # the sampler's own case, bf16 in and out (on CUDA the scores come out in fp32 through bmm's out_dtype; on the
        # CPU through an fp32 matmul): against the same bf16 inputs in fp32, off by the bf16 rounding of the
        # probabilities and the output (<= 0.012 on the CPU here)
        qh, kh, vh = (x.bfloat16() for x in (query, key, value))
        ref = sampler.gqa_attention(None, qh.float(), kh.float(), vh.float(), mask, scale)[0]  # fp32, checked above
        got = sampler.gqa_attention(None, qh, kh, vh, mask, scale)[0]
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), ref, atol=3e-2, rtol=1e-2)
    mask[..., 1:] = False  # only the first slot: the output is its value, whatever the scores
    one = sampler.gqa_attention(None, query, key, value, mask, None)[0]
    torch.testing.assert_close(one, value[:, :, :1].repeat_interleave(H // Hkv, 1).transpose(1, 2).expand(B, q, H, D))


def test_breakdown_attention_sdpa_decodes_through_the_contender(capsys, monkeypatch):
    """breakdown.py --attention sdpa: every decode step's attention is the contender's; the sampler's own is put
    back here afterwards (the registration is global)."""
    import sampler
    from transformers import AttentionInterface
    from bench import breakdown, sdpa
    calls, contender = [], sdpa.sdpa_attention
    monkeypatch.setattr(sdpa, "sdpa_attention", lambda *a, **kw: (calls.append(a[1].shape[2]), contender(*a, **kw))[1])
    try:
        breakdown.main(["--model", "tiny", "--attention", "sdpa", "--workloads", "natural", "--check-every", "8",
                        "--new-tokens", "8", "--prompts", "2", "--n", "2"])
    finally:
        AttentionInterface.register("gqa_static", sampler.gqa_attention)
    assert "sdpa_attention on" in capsys.readouterr().out
    assert calls and set(calls) == {1}  # decoding only: one query per row (the prefill is SDPA's causal attention)


def test_decode_attention_routes_only_the_calls_inside_it(tiny):
    """bench/sampler.py's decode_attention (the 'ours, SDPA attention' contender): a sample_fast call inside the block
    decodes through the given function, and the sampler's own attention is back after it, also after an error."""
    import sampler
    from transformers import AttentionInterface
    from bench.sampler import decode_attention
    from bench.sdpa import sdpa_attention
    model, tok = tiny
    calls = []
    spy = lambda *a, **kw: (calls.append(a[1].shape[2]), sdpa_attention(*a, **kw))[1]
    run = lambda: [c.tokens for c in sampler.sample_fast(model, [[5, 6, 7], [8, 9]], 2, 6, 0.7, [], 0,
                                                         torch.Generator().manual_seed(0))]
    with decode_attention(spy):
        inside = run()
    assert calls and set(calls) == {1}  # decoding only (one query per row); the prefill is SDPA's causal attention
    n = len(calls)
    assert run() == inside and len(calls) == n  # fp32 on CPU: the same tokens; outside the block, not called
    with pytest.raises(RuntimeError), decode_attention(spy):
        raise RuntimeError
    assert AttentionInterface._global_mapping["gqa_static"] is sampler.gqa_attention


def test_lanes_bench_splits_the_work_and_leaves_the_sampler_as_it_was(capsys):
    """bench/lanes.py (issue 15 item 3's measurement): every prompt in exactly one lane, a capture state per thread,
    each lane count timed on the same work, every lane writing the same tokens at once as alone, and the sampler's
    capture state and CUDAGraph restored afterwards."""
    import threading
    from bench import lanes
    assert lanes.split(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert lanes.split(list(range(2)), 3) == [[0], [1], []]
    per = lanes.PerThread()
    per.setdefault("dev", "main")
    seen = []
    t = threading.Thread(target=lambda: seen.append((per.get("dev"), per.setdefault("dev", "other"))))
    t.start()
    t.join()
    assert seen == [(None, "other")] and per.get("dev") == "main"
    import sampler as sampler_module
    capture, graph = sampler_module._CAPTURE, torch.cuda.CUDAGraph
    lanes.main(["--workflow", "evalopt", "--lora", "4", "--prompts", "3", "--n", "2", "--new-tokens", "6",
                "--lanes", "1,2", "--repeats", "1"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tiny: 3 prompts x 2, <= 6 new tokens, evalopt per lane, LoRA rank 4 per role")
    assert out[1].startswith("lanes 1: ") and out[1].endswith("1.00x the 1-lane time")
    assert out[2].startswith("lanes 2: ") and "x the 1-lane time" in out[2]
    assert all(", the same at once as alone;" in line for line in out[1:3])  # each lane's tokens, at once and alone
    assert sampler_module._CAPTURE is capture and torch.cuda.CUDAGraph is graph
