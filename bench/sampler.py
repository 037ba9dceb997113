"""Benchmark: our sampler vs Hugging Face `model.generate` on the same workload, side by side.

Every row generates exactly --new-tokens tokens (stop ids masked until then, `min_new_tokens` on
both sides), so both contenders produce the same number of tokens. Each contender is run once to
warm up, then timed over --repeats calls; tokens/s and the ratio are printed.

    python bench/sampler.py                      # tiny model on CPU, small workload
    python bench/sampler.py --model /root/mdl/model.gguf --prompts 64 --n 8 --new-tokens 512
    python bench/sampler.py --model /root/mdl/model.gguf --arch qwen3-1.7b ...   # random weights
    python bench/sampler.py ... --compile --lora 64   # + compile=True; + a LoRA adapter unmerged / merged

--arch builds a randomly initialised Qwen3 of that size (its published shape) and uses --model only
for the tokenizer. The floor printed is the larger of (weights + KV cache read once per decode step)
/ bandwidth and 2 x params x rows FLOPs / matrix rate, summed over the steps, with the H200's
measured 4.3 TB/s and 790 TFLOP/s (../shared/docs/gpu.md).
"""
import argparse
import contextlib
import os
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from data import builtin_problems, load_problems  # noqa: E402
from models import chat_ids, load_model, stop_ids  # noqa: E402
from sampler import sample  # noqa: E402
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
    p.add_argument("--compile", action="store_true", help="also time ours with sample(compile=True)")
    p.add_argument("--lora", type=int, default=0, help="rank: time ours with a random LoRA adapter, unmerged vs lora.merged")
    p.add_argument("--skip", nargs="*", default=[], choices=["dynamic", "static", "ours"], help="contenders to leave out")
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
    stops, N = stop_ids(model, tok), args.new_tokens
    rows = args.prompts * args.n
    gen = torch.Generator(device=device).manual_seed(0)

    def ours(compile=False):
        out = sample(model, prompts, n=args.n, max_new_tokens=N, temperature=args.temperature,
                     stop_ids=stops, pad_id=tok.pad_token_id, generator=gen, min_new_tokens=N, compile=compile)
        assert sum(len(c.tokens) for c in out) == rows * N

    L = max(map(len, prompts))
    batch = [p for p in prompts for _ in range(args.n)]
    ids = torch.tensor([[tok.pad_token_id] * (L - len(p)) + p for p in batch], device=device)
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in batch], device=device)

    def hf(**extra):
        def run():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                 temperature=args.temperature, top_p=1.0, top_k=0, max_new_tokens=N,
                                 min_new_tokens=N, eos_token_id=stops, pad_token_id=tok.pad_token_id, **extra)
            assert out.shape == (rows, L + N)
        return run

    contenders = []
    if "dynamic" not in args.skip:
        contenders.append(("model.generate (dynamic cache)", hf()))
    if device.type == "cuda" and "static" not in args.skip:
        contenders.append(("model.generate (static cache)", hf(cache_implementation="static")))
    if "ours" not in args.skip:
        contenders.append(("ours: sampler.sample", ours))
    if args.compile and device.type != "cuda":
        print("--compile skipped: compile=True applies to the CUDA fast path only")
    elif args.compile:
        contenders.append(("ours, compile=True", lambda: ours(compile=True)))
    if args.lora:  # timed last: the adapter is added at its first (warm-up) call, after the others ran
        def with_adapter(merge):
            if "bench" not in lora.adapter_names(model):
                lora.add_adapter(model, "bench", rank=args.lora, alpha=args.lora)
                with torch.no_grad():  # B random (a trained adapter), so the unmerged path does real work
                    for p_ in lora.adapter_parameters(model, "bench"):
                        p_.normal_(0, 0.01)
            with lora.use_adapter(model, "bench"), (lora.merged(model) if merge else contextlib.nullcontext()):
                ours()
        contenders += [(f"ours, LoRA r{args.lora} unmerged", lambda: with_adapter(False)),
                       (f"ours, LoRA r{args.lora} merged", lambda: with_adapter(True))]
    print(f"model={args.arch or args.model} device={device} rows={rows} ({args.prompts} prompts x {args.n}) "
          f"new_tokens={N} prompt_len<={L} T={args.temperature}")
    results = {}
    for name, fn in contenders:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        seconds = timed(fn, device, args.repeats)
        results[name] = rows * N / seconds
        mem = f"  peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device.type == "cuda" else ""
        print(f"{name:34s} {seconds:8.2f} s/call {results[name]:10,.0f} tok/s{mem}")
    ours_tps = max((v for k, v in results.items() if k.startswith("ours") and "LoRA" not in k), default=None)
    hf_tps = [v for k, v in results.items() if k.startswith("model.generate")]
    if ours_tps and hf_tps:
        print(f"ratio ours / best model.generate: {ours_tps / max(hf_tps):.2f}x")
    if device.type == "cuda":  # the floor uses the H200's measured bandwidth and matrix rate
        floor = floor_seconds(model, rows, L, N)
        print(f"floor (bandwidth / FLOPs bound): {floor:.3f} s/call = {rows * N / floor:,.0f} tok/s")
        if ours_tps:
            print(f"ratio ours / floor: {ours_tps / (rows * N / floor):.3f}")


if __name__ == "__main__":
    main()
