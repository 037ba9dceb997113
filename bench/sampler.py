"""Benchmark: our sampler vs Hugging Face `model.generate` on the same workload, side by side.

Every row generates exactly --new-tokens tokens (stop ids masked until then, `min_new_tokens` on
both sides), so both contenders produce the same number of tokens. Each contender is run once to
warm up, then timed over --repeats calls; tokens/s and the ratio are printed.

    python bench/sampler.py                      # tiny model on CPU, small workload
    python bench/sampler.py --model /root/mdl/model.gguf --prompts 64 --n 8 --new-tokens 512
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from data import builtin_problems, load_problems  # noqa: E402
from models import chat_ids, load_model, stop_ids  # noqa: E402
from sampler import sample  # noqa: E402


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
    args = p.parse_args()

    model, tok = load_model(args.model)
    device = next(model.parameters()).device
    problems = load_problems(args.data, "math") if args.data else builtin_problems("math", "test", n=args.prompts)
    prompts = [chat_ids(tok, q["prompt"]) for q in problems[:args.prompts]]
    stops, N = stop_ids(model, tok), args.new_tokens
    rows = args.prompts * args.n
    gen = torch.Generator(device=device).manual_seed(0)

    def ours():
        out = sample(model, prompts, n=args.n, max_new_tokens=N, temperature=args.temperature,
                     stop_ids=stops, pad_id=tok.pad_token_id, generator=gen, min_new_tokens=N)
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

    contenders = [("model.generate (dynamic cache)", hf())]
    if device.type == "cuda":
        contenders.append(("model.generate (static cache)", hf(cache_implementation="static")))
    contenders.append(("ours: sampler.sample", ours))
    print(f"model={args.model} device={device} rows={rows} ({args.prompts} prompts x {args.n}) "
          f"new_tokens={N} prompt_len<={L} T={args.temperature}")
    results = {}
    for name, fn in contenders:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        seconds = timed(fn, device, args.repeats)
        results[name] = rows * N / seconds
        mem = f"  peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device.type == "cuda" else ""
        print(f"{name:34s} {seconds:8.2f} s/call {results[name]:10,.0f} tok/s{mem}")
    best_hf = max(v for k, v in results.items() if k.startswith("model.generate"))
    print(f"ratio ours / best model.generate: {results['ours: sampler.sample'] / best_hf:.2f}x")


if __name__ == "__main__":
    main()
