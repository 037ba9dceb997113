"""Benchmark: one LoRA update (forward, log-probs of the sampled tokens, backward, AdamW step), our
chunked log-probs (grpo.completion_logprobs) vs the obvious alternative measured side by side: full-
vocabulary fp32 logits then log_softmax over everything (what a PEFT + plain HF loop does).

Rows are random token sequences of --length tokens whose last --completion tokens are the
"completion" that gets gradient. LoRA rank 64, alpha 32 on all linear layers, as the reference.
Prints tokens/s (all tokens of a row, prompt included) and peak GPU memory per batch size.

    python bench/train.py --model /root/mdl/model.gguf --rows 16 32 64
    python bench/train.py                                   # tiny model on CPU (a smoke test)
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import grpo  # noqa: E402
import lora  # noqa: E402
from models import load_model  # noqa: E402


def full_vocab_logprobs(model, prompts, completions, temperature=1.0):
    """The alternative: logits for every position and the whole vocabulary in fp32."""
    seqs = torch.tensor([p + c for p, c in zip(prompts, completions)], device=next(model.parameters()).device)
    logits = model(input_ids=seqs).logits.float() / temperature
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, seqs[:, 1:, None])[..., 0]
    n = len(completions[0])
    return list(logp[:, -n:])


def run(model, fn, rows, length, completion, opt, repeats):
    device = next(model.parameters()).device
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(0)
    seqs = torch.randint(0, vocab, (rows, length), generator=g).tolist()
    prompts, comps = [s[:-completion] for s in seqs], [s[-completion:] for s in seqs]

    def step():
        opt.zero_grad(set_to_none=True)
        lps = fn(model, prompts, comps, 1.0)
        loss = -torch.cat(lps).mean()
        loss.backward()
        opt.step()
    step()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(repeats):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t) / repeats
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return rows * length / seconds, seconds, peak


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="tiny, a local folder, a hub name or a .gguf file")
    p.add_argument("--rows", type=int, nargs="+", default=[4, 8], help="batch sizes (rows)")
    p.add_argument("--length", type=int, default=768, help="tokens per row")
    p.add_argument("--completion", type=int, default=512, help="completion tokens per row (get gradient)")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per measurement")
    args = p.parse_args()
    model, _ = load_model(args.model)
    lora.add_adapter(model, "bench", rank=64, alpha=32)
    lora.set_adapter(model, "bench")
    model.train()
    opt = torch.optim.AdamW(lora.adapter_parameters(model, "bench"), lr=1e-5)
    print(f"model={args.model} tokens/row={args.length} (completion {args.completion}) LoRA r64 all linear")
    print(f"{'rows':>5} {'ours tok/s':>11} {'ours GiB':>9} {'full-vocab tok/s':>17} {'full GiB':>9} {'speed x':>8}")
    for rows in args.rows:
        results = {}
        ours = lambda *a: grpo.completion_logprobs(*a)[0]
        for name, fn in [("ours", ours), ("full", full_vocab_logprobs)]:
            try:
                results[name] = run(model, fn, rows, args.length, args.completion, opt, args.repeats)
            except torch.OutOfMemoryError:
                results[name] = (float("nan"), float("nan"), float("inf"))
                torch.cuda.empty_cache()
        (a, _, ma), (b, _, mb) = results["ours"], results["full"]
        print(f"{rows:5d} {a:11,.0f} {ma:9.1f} {b:17,.0f} {mb:9.1f} {a / b:8.2f}", flush=True)


if __name__ == "__main__":
    main()
