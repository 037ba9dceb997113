"""Benchmark: our sampler vs Hugging Face `model.generate` on the same workload, side by side.

Forced workload (default): every row generates exactly --new-tokens tokens (stop ids masked until
then, `min_new_tokens` on both sides), so every contender produces the same number of tokens.
Natural-stop workload (--natural, what rollouts are): a row ends at a stop id or at --new-tokens;
each contender's generated tokens are counted and its time per call compared. --vllm FOLDER adds
vLLM (when importable; a benchmark contender only, never a dependency) on the same prompts, with
the same stop ids, temperature and n. On CUDA ours also runs with bench/sdpa.py's sdpa_attention (SDPA, the sampler's
decode attention until the twenty-third session) as its decode attention (`decode_attention`), and --long LO HI makes the prompts LO-HI tokens long (solved problems, then one asking
for only a boxed answer: an aggregator's call with --natural, a synthesiser's long decode without it; use --n 1). Each contender is run once to warm up, then timed over
--repeats calls; tokens/s and the ratios are printed. --profile prints, for our decode step at 8,
64 and 512 rows, the time per step under the CUDA graph, the kernels per step and their GPU time
(eager, torch.profiler), the same under the graph (if the profiler sees the replays' kernels), one graph
replayed alone back to back (what the host's sampling and bookkeeping between replays add), the top kernels,
and how many graphs a natural-stop call captures.

    python bench/sampler.py                      # tiny model on CPU, small workload
    python bench/sampler.py --model /root/mdl/model.gguf --prompts 64 --n 8 --new-tokens 512
    python bench/sampler.py --model /root/mdl/model.gguf --arch qwen3-1.7b ...   # random weights
    python bench/sampler.py ... --lora 64             # + a LoRA adapter unmerged / merged
    python bench/sampler.py --model /root/mdl/hf --data gsm8k_test.jsonl --prompts 64 --n 8 \
        --new-tokens 512 --natural --vllm /root/mdl/hf --skip dynamic static   # rollouts vs vLLM

--arch builds a randomly initialised Qwen3 of that size (its published shape) and uses --model only
for the tokenizer. The floor printed is the larger of (weights + KV cache read once per decode step)
/ bandwidth and 2 x params x rows FLOPs / matrix rate, summed over the steps, with the H200's
measured 4.3 TB/s and 790 TFLOP/s (../shared/docs/gpu.md).
"""
import argparse
import contextlib
import functools
import inspect
import os
import sys
import time

import torch
import transformers
from transformers import AttentionInterface

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from data import builtin_problems, load_problems  # noqa: E402
from models import chat_ids, load_model, stop_ids  # noqa: E402
from sampler import gqa_attention, sample  # noqa: E402
from bench.sdpa import sdpa_attention  # noqa: E402
import lora  # noqa: E402


ARCHS = {  # published Qwen3 shapes; weights random
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
}
BANDWIDTH, MATMUL = 4.3e12, 790e12  # bytes/s, FLOP/s: measured on the H200


def floor_seconds(model, rows, prompt_len, new_tokens):
    """Lower bound on the decode time: per step, max(bytes / bandwidth, FLOPs / matrix rate)."""
    c = model.config.get_text_config()
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * next(model.parameters()).element_size()
    total = 0.0
    for t in range(new_tokens):
        kv_bytes = rows * (prompt_len + t) * kv_per_token
        total += max((weight_bytes + kv_bytes) / BANDWIDTH, 2 * params * rows / MATMUL)
    return total


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats):
    fn()  # warm-up: the first call at a batch size is much slower
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - start) / repeats


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="tiny, a local folder, a hub name or a .gguf file")
    p.add_argument("--data", default=None, help="math JSONL for prompts (default: built-in problems)")
    p.add_argument("--prompts", type=int, default=8, help="distinct prompts")
    p.add_argument("--n", type=int, default=4, help="samples per prompt")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per row (forced)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    p.add_argument("--repeats", type=int, default=2, help="timed calls per contender after warm-up")
    p.add_argument("--arch", choices=list(ARCHS), default=None, help="random-weight Qwen3 of this shape")
    p.add_argument("--lora", type=int, default=0, help="rank: time ours with a random LoRA adapter, unmerged vs lora.merged")
    p.add_argument("--natural", action="store_true", help="rows stop at a stop id (rollouts), not forced")
    p.add_argument("--long", type=int, nargs=2, default=None, metavar=("LO", "HI"), help="prompts of LO-HI tokens "
                   "(solved problems, then a new one: a synthesiser's or aggregator's call, bench/breakdown.py's)")
    p.add_argument("--vllm", default=None, help="HF model folder: add vLLM as a contender")
    p.add_argument("--profile", action="store_true", help="profile our decode step at 8, 64, 512 rows")
    p.add_argument("--skip", nargs="*", default=[], choices=["dynamic", "static", "ours", "fused", "sdpa"],
                   help="contenders to leave out")
    args = p.parse_args()

    model, tok = load_model(args.model)
    device = next(model.parameters()).device
    if args.arch:
        config = transformers.Qwen3Config(vocab_size=model.config.vocab_size, tie_word_embeddings=True,
                                          max_position_embeddings=40960, rope_theta=1e6, **ARCHS[args.arch])
        dtype = next(model.parameters()).dtype
        with torch.device(device):
            model = transformers.Qwen3ForCausalLM(config).to(dtype).eval().requires_grad_(False)
        model.generation_config.eos_token_id = stop_ids(model, tok)
    problems = load_problems(args.data, "math") if args.data else builtin_problems("math", "test", n=args.prompts)
    prompts = [chat_ids(tok, q["prompt"]) for q in problems[:args.prompts]]
    if args.long:
        from bench.breakdown import long_prompts
        sizes = [len(ids) for ids in tok([f"Problem: {q['prompt']}\nAnswer: {q['answer']}\n\n" for q in problems],
                                         add_special_tokens=False)["input_ids"]]
        prompts = long_prompts(tok, problems, sizes, args.prompts, *args.long, 0)
    stops, N = stop_ids(model, tok), args.new_tokens
    rows = args.prompts * args.n
    gen = torch.Generator(device=device).manual_seed(0)

    forced = 0 if args.natural else N
    generated = {}  # contender -> tokens of its last call

    def ours(name="ours", fuse=False, sdpa=False):
        with fused_layers(model) if fuse else contextlib.nullcontext(), \
                decode_attention(sdpa_attention) if sdpa else contextlib.nullcontext():
            out = sample(model, prompts, n=args.n, max_new_tokens=N, temperature=args.temperature, stop_ids=stops,
                         pad_id=tok.pad_token_id, generator=gen, min_new_tokens=forced)
        generated[name] = sum(len(c.tokens) for c in out)
        assert args.natural or generated[name] == rows * N

    L = max(map(len, prompts))
    batch = [p for p in prompts for _ in range(args.n)]
    ids = torch.tensor([[tok.pad_token_id] * (L - len(p)) + p for p in batch], device=device)
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in batch], device=device)

    def hf(name, **extra):
        def run():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                 temperature=args.temperature, top_p=1.0, top_k=0, max_new_tokens=N,
                                 min_new_tokens=forced, eos_token_id=stops, pad_token_id=tok.pad_token_id, **extra)
            hit = torch.isin(out[:, L:], torch.tensor(stops, device=device))  # count up to and with the first stop
            generated[name] = int(torch.where(hit.any(1), hit.int().argmax(1) + 1, hit.shape[1]).sum())
            assert args.natural or out.shape == (rows, L + N)
        return run

    contenders = []
    if "dynamic" not in args.skip:
        contenders.append(("model.generate (dynamic cache)", hf("model.generate (dynamic cache)")))
    if device.type == "cuda" and "static" not in args.skip:
        contenders.append(("model.generate (static cache)", hf("model.generate (static cache)",
                                                                   cache_implementation="static")))
    if "ours" not in args.skip:
        contenders.append(("ours: sampler.sample", lambda: ours(name="ours: sampler.sample")))
        if device.type == "cuda":  # + the decoder's norms, MLPs and rotary compiled (fused_layers below)
            if "fused" not in args.skip:
                contenders.append(("ours, fused_layers", lambda: ours(name="ours, fused_layers", fuse=True)))
            if "sdpa" not in args.skip:
                contenders.append(("ours, SDPA attention", lambda: ours(name="ours, SDPA attention", sdpa=True)))
    if args.lora:  # timed last: the adapter is added at its first (warm-up) call, after the others ran
        def with_adapter(merge):
            if "bench" not in lora.adapter_names(model):
                lora.add_adapter(model, "bench", rank=args.lora, alpha=args.lora)
                with torch.no_grad():  # B random (a trained adapter), so the unmerged path does real work
                    for p_ in lora.adapter_parameters(model, "bench"):
                        p_.normal_(0, 0.01)
            lora.set_adapter(model, "bench")
            with lora.merged(model) if merge else contextlib.nullcontext():
                ours(name=f"ours, LoRA r{args.lora} {'merged' if merge else 'unmerged'}")
            lora.set_adapter(model, None)
        contenders += [(f"ours, LoRA r{args.lora} unmerged", lambda: with_adapter(False)),
                       (f"ours, LoRA r{args.lora} merged", lambda: with_adapter(True))]
    if args.vllm:  # last: its engine starts at the warm-up call, after ours ran
        contenders.append(("vLLM", vllm_contender(args, prompts, stops, forced, generated)))
    print(f"model={args.arch or args.model} device={device} rows={rows} ({args.prompts} prompts x {args.n}) "
          f"new_tokens{'<=' if args.natural else '='}{N} prompt_len<={L} T={args.temperature}")
    if args.profile:
        profile(model, tok, prompts, stops, device, args)
    results, times = {}, {}
    for name, fn in contenders:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        seconds = times[name] = timed(fn, device, args.repeats)
        results[name] = generated.get(name, rows * N) / seconds
        mem = f"  peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device.type == "cuda" and name != "vLLM" else ""
        print(f"{name:34s} {seconds:8.3f} s/call {generated.get(name, rows * N):9,d} tokens "
              f"{results[name]:10,.0f} tok/s{mem}")
    if args.natural and "vLLM" in times:
        for name in times:
            if name.startswith("ours"):
                print(f"time vLLM / {name}: {times['vLLM'] / times[name]:.2f}x (per call, same prompts)")
    ours_tps = max((v for k, v in results.items() if k.startswith("ours") and "LoRA" not in k), default=None)
    hf_tps = [v for k, v in results.items() if k.startswith("model.generate")]
    if ours_tps and hf_tps:
        print(f"ratio ours / best model.generate: {ours_tps / max(hf_tps):.2f}x")
    if device.type == "cuda":  # the floor uses the H200's measured bandwidth and matrix rate
        floor = floor_seconds(model, rows, L, N)
        print(f"floor (bandwidth / FLOPs bound): {floor:.3f} s/call = {rows * N / floor:,.0f} tok/s")
        if ours_tps:
            print(f"ratio ours / floor: {ours_tps / (rows * N / floor):.3f}")


@contextlib.contextmanager
def decode_attention(fn):
    """sample_fast's decode attention ("gqa_static", sampler.gqa_attention) pointed at `fn` while the block runs. Safe
    between calls: each call captures its own CUDA graphs."""
    AttentionInterface.register("gqa_static", fn)
    try:
        yield
    finally:
        AttentionInterface.register("gqa_static", gqa_attention)


_COMPILED = {}  # function -> its torch.compile'd copy, compiled once per process (and per input rank)


@contextlib.contextmanager
def fused_layers(model):
    """A contender tried for sampler.py and left here (docs/benchmarks.md, 2026-12-01): while it is on, the
    decoder's RMSNorms, MLPs and rotary embedding run torch.compile'd copies of the model's own code (each
    norm's ~8 elementwise kernels become 1, rotary's ~10 for q and k 1-2, SiLU-mul 1: the 0.5B's decode step
    1,116 kernels -> 557). 16-21% faster decode steps at 64-512 rows, 3% on a natural-stop call then (third
    session); since the nineteenth, capture-safe on new prompts and 1.21-1.36x per call (breakdown.py --fused)."""
    options = {"emulate_precision_casts": True}
    compiled = lambda f: _COMPILED.setdefault(f, torch.compile(f, dynamic=True, options=options))
    # (object, attribute, compiled copy): a module's forward as an instance attribute (nn.Module calls it)
    patches = [(m, "forward", functools.partial(compiled(type(m).forward), m)) for m in model.modules()
               if type(m).__name__.endswith(("RMSNorm", "MLP"))]
    if hasattr(module := inspect.getmodule(type(model)), "apply_rotary_pos_emb"):
        patches.append((module, "apply_rotary_pos_emb", compiled(module.apply_rotary_pos_emb)))
    saved = [(obj, name, vars(obj).get(name)) for obj, name, _ in patches]  # None: not set on the object itself
    for obj, name, new in patches:
        setattr(obj, name, new)
    # Compile (and let Inductor tune, which syncs the device) every specialisation before any graph capture: dynamic=True
    # still compiles a dimension of size 1 apart, and a call's decode left with 1 row, or its first decode step
    # (1 token), would otherwise compile and tune inside a capture, which fails there (nineteenth session: "operation
    # not permitted when stream is capturing" at the second call on new prompts). Rows and tokens of 1 and 2.
    device = next(model.parameters()).device
    with torch.no_grad():
        for rows, tokens in ((1, 1), (2, 1), (1, 2), (2, 2)):
            model(input_ids=torch.zeros(rows, tokens, dtype=torch.long, device=device), use_cache=False)
    try:
        yield
    finally:
        for obj, name, old in saved:
            delattr(obj, name) if old is None else setattr(obj, name, old)


def vllm_contender(args, prompts, stops, forced, generated):
    """vLLM's offline engine on the same prompt ids (its own process, a third of the GPU's memory),
    started at the first call (timed() warms up with it)."""
    engine = []

    def run():
        from vllm import LLM, SamplingParams
        if not engine:
            engine.append(LLM(model=args.vllm, dtype="bfloat16", gpu_memory_utilization=0.3, seed=0,
                              enable_prefix_caching=False))
        llm = engine[0]
        params = SamplingParams(n=args.n, temperature=args.temperature, top_p=1.0, max_tokens=args.new_tokens,
                                min_tokens=forced, stop_token_ids=list(stops), ignore_eos=bool(forced))
        out = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        generated["vLLM"] = sum(len(c.token_ids) for o in out for c in o.outputs)
    return run


def profile(model, tok, prompts, stops, device, args):
    """Our decode step at 8, 64 and 512 rows, unfused and fused: ms per step under the graph (from forced calls of 1 and
    129 new tokens), then one eager step under torch.profiler: kernels per step, their GPU time, top
    kernels. Then the graphs a natural-stop call captures (new batch size or attended-length bucket)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    import sampler
    for fuse, rows in [(f, r) for f in (False, True) if not (f and "fused" in args.skip) for r in (8, 64, 512)]:
        batch = [prompts[i % len(prompts)] for i in range(rows)]
        def call(n_new, graph=None):
            with fused_layers(model) if fuse else contextlib.nullcontext():
                return sampler.sample_fast(model, batch, 1, n_new, args.temperature, stops, tok.pad_token_id,
                                           min_new_tokens=n_new, cuda_graph=graph)
        t1, t129 = timed(lambda: call(1), device, 2), timed(lambda: call(129), device, 2)
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            call(17, graph=False)
            sync(device)
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof1:
            call(1, graph=False)
            sync(device)
        kernels = lambda p: [e for e in p.events() if e.device_type.name == "CUDA"]
        k17, k1 = kernels(prof), kernels(prof1)
        per_step = (len(k17) - len(k1)) / 16
        gpu_ms = (sum(e.device_time for e in k17) - sum(e.device_time for e in k1)) / 16 / 1e3
        print(f"profile fuse={fuse} rows={rows}: graph {1e3 * (t129 - t1) / 128:.3f} ms/step; eager {per_step:.0f} kernels/step, "
              f"{gpu_ms:.3f} ms GPU time/step")
        # the graph path: the GPU's busy time per step (kernels inside the replays, if the profiler sees them), and
        # one graph replayed alone back to back (no sampling or bookkeeping between replays: what the host adds)
        busy = []
        for n_new in (1, 129):
            with torch_profile(activities=[ProfilerActivity.CUDA]) as profg:
                call(n_new)
                sync(device)
            seen = kernels(profg)
            busy.append((len(seen), sum(e.device_time for e in seen) / 1e3))
        alone, replays, real_replay = [], [0], torch.cuda.CUDAGraph.replay

        def replay(g):  # the call's 64th replay: then 50 more of the same graph, timed (the same slot: no harm done)
            real_replay(g)
            replays[0] += 1
            if replays[0] == 64:
                sync(device)
                t0 = time.perf_counter()
                for _ in range(50):
                    real_replay(g)
                sync(device)
                alone.append(1e3 * (time.perf_counter() - t0) / 50)
        torch.cuda.CUDAGraph.replay = replay
        try:
            call(129)
        finally:
            torch.cuda.CUDAGraph.replay = real_replay
        print(f"  graph path: {(busy[1][0] - busy[0][0]) / 128:.0f} kernels/step seen by the profiler, "
              f"{(busy[1][1] - busy[0][1]) / 128:.3f} ms GPU busy/step; one graph replayed alone: "
              f"{alone[0] if alone else float('nan'):.3f} ms/replay")
        if rows == 8 or (rows == 512 and fuse):
            print(prof.key_averages().table(sort_by="device_time_total", row_limit=12, max_name_column_width=60))
    captures = []
    real = torch.cuda.CUDAGraph
    torch.cuda.CUDAGraph = lambda *a, **k: captures.append(1) or real(*a, **k)
    try:
        t0 = time.perf_counter()
        out = sample(model, prompts, n=args.n, max_new_tokens=args.new_tokens, temperature=args.temperature,
                     stop_ids=stops, pad_id=tok.pad_token_id)
        sync(device)
        lengths = sorted(len(c.tokens) for c in out)
        print(f"natural-stop call: {time.perf_counter() - t0:.2f} s, {len(captures)} graphs captured, lengths "
              f"p50 {lengths[len(lengths) // 2]} p90 {lengths[int(0.9 * len(lengths))]} max {lengths[-1]}")
    finally:
        torch.cuda.CUDAGraph = real


if __name__ == "__main__":
    main()
