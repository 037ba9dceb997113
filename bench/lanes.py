"""Benchmark for issue 15 item 3, measured before anything is built: do sampler calls overlap on the GPU when several
run at once, each on its own CUDA stream and host thread ("lanes")? Measured on the H200 (2026-12-03,
docs/benchmarks.md): no, K lanes at once took 1.14-1.46x the time of one batch of all the rows, so train.py has none.

A rollout stage ends when its longest row ends, and the tail's decode steps with a few rows left cost ~4 ms each
whatever the row count: the GPU is mostly idle then. If another lane's call fills that time, a step whose episodes
are split into K lanes running side by side ends sooner, with every call the same code as today. Each lane has its own
copy of the model (and, with --lora, its own adapters, folded in per call as make_policy does), so under IP one lane's
evaluator and another's generator can run at once: the cost is memory (a copy of the weights per lane), not the 1.48x
of running rows of different adapters unmerged in one batch.

    python bench/lanes.py                                             # tiny model on CPU: runs through, times nothing real
    python bench/lanes.py --model /root/mdl/hf --data gsm8k/test.jsonl --prompts 64 --n 8 --new-tokens 512   # natural stop
    python bench/lanes.py --model /root/mdl/hf --data gsm8k/train.jsonl --workflow evalopt --lora 64 \\
        --prompts 16 --n 8 --new-tokens 384                           # an Eval-Opt IP step's rollout (no update)

For each K in --lanes the same prompts (problems) are split into K contiguous parts; each lane runs the whole workload on
its part (one sampler call, or run_workflow) on its own model copy, stream and thread. Each lane first runs alone, twice
(a warm-up: compiles, captures; then the reference), then all K run at once --repeats times. Printed per K: the wall
time at once (median) and one after another, the tokens, whether every lane wrote the same tokens at once as alone
(the same rows and seed: anything else is lanes corrupting each other), the lane threads' host CPU time (a GIL-bound
run shows there), and the time relative to K = 1 (one lane: today's one batch). K changes which rows share a batch,
so the tokens differ between lane counts; compare the token counts too.
Bench only: for lanes to capture CUDA graphs at once, the sampler's per-process capture state (sampler._CAPTURE) is made
per thread and graphs are captured in thread-local mode, by patching, for every K alike, undone at the end.
Left out: the update, grading, and whether the project should adopt lanes (the numbers decide).
"""
import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import lora  # noqa: E402
import sampler  # noqa: E402
import workflows  # noqa: E402
from data import builtin_problems, load_problems  # noqa: E402
from bench.sampler import sync  # noqa: E402
from models import chat_ids, load_model, stop_ids  # noqa: E402


class PerThread(dict):
    """sampler._CAPTURE keyed by (thread, device) instead of device: each lane its own side stream and graph pool."""

    def get(self, key, default=None):
        return super().get((threading.get_ident(), key), default)

    def setdefault(self, key, default=None):
        return super().setdefault((threading.get_ident(), key), default)


@contextlib.contextmanager
def lanes_patched():
    """Per-thread capture state, and graphs captured in thread-local mode (the default, global, refuses another thread's
    allocations while one thread captures)."""
    saved = sampler._CAPTURE, torch.cuda.CUDAGraph

    class ThreadLocalGraph(saved[1]):
        def capture_begin(self, pool=None, capture_error_mode="thread_local"):
            super().capture_begin(pool, capture_error_mode=capture_error_mode)

    sampler._CAPTURE, torch.cuda.CUDAGraph = PerThread(), ThreadLocalGraph
    try:
        yield
    finally:
        sampler._CAPTURE, torch.cuda.CUDAGraph = saved


def split(items, k):
    """items in k contiguous parts, as even as can be (the first ones one longer)."""
    q, r = divmod(len(items), k)
    return [items[i * q + min(i, r):(i + 1) * q + min(i + 1, r)] for i in range(k)]


class Lanes:
    """k lanes, lane i always on its own thread (a one-thread pool each) with its own stream and its own capture side
    stream (sampler._CAPTURE's entry for that thread, set here). torch.cuda.Stream() hands out one of 32 pooled streams
    per device in turn, so the 2k streams are taken together, once per lane count, and must be distinct (k <= 16)."""

    def __init__(self, k, device):
        if device.type == "cuda" and 2 * k > 32:
            sys.exit(f"error: {k} lanes need {2 * k} CUDA streams; torch pools 32 per device")
        self.k, self.device = k, device
        self.pools = [ThreadPoolExecutor(1) for _ in range(k)]
        cuda = device.type == "cuda"
        self.streams = [torch.cuda.Stream(device) if cuda else None for _ in range(k)]
        sides = [torch.cuda.Stream(device) if cuda else None for _ in range(k)]
        if cuda:
            for pool, side in zip(self.pools, sides):
                pool.submit(lambda side=side: sampler._CAPTURE.setdefault(device, [side, None])).result()

    def run(self, work, lanes):
        """work(i, k) -> (tokens, digest), for the lanes given, at once. Returns (seconds, [(tokens, digest, CPU s)])."""
        def lane(i):
            cpu = time.thread_time()
            with torch.cuda.stream(self.streams[i]) if self.streams[i] else contextlib.nullcontext():
                tokens, digest = work(i, self.k)
            if self.streams[i]:
                self.streams[i].synchronize()
            return tokens, digest, time.thread_time() - cpu

        sync(self.device)
        start = time.perf_counter()
        futures = [self.pools[i].submit(lane, i) for i in lanes]
        out = [f.result() for f in futures]
        sync(self.device)
        return time.perf_counter() - start, out

    def close(self):
        for pool in self.pools:
            pool.shutdown()
        sampler._CAPTURE.clear()  # the next lane count's threads start with fresh entries


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="tiny, a local folder, a hub name or a .gguf file")
    p.add_argument("--data", default=None, help="math JSONL (default: built-in problems)")
    p.add_argument("--workflow", default=None, choices=list(workflows.WORKFLOWS),
                   help="run this workflow's rollout per lane (default: one sampler call per lane)")
    p.add_argument("--lora", type=int, default=0, help="rank: every role its own adapter (IP), folded in per call")
    p.add_argument("--prompts", type=int, default=8, help="prompts (problems) in all, split over the lanes")
    p.add_argument("--n", type=int, default=4, help="samples per prompt (the group)")
    p.add_argument("--new-tokens", type=int, default=32, help="at most this many tokens per row and call")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--lanes", default="1,2,4", help="comma list of lane counts to time")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per lane count after a warm-up run")
    args = p.parse_args(argv)
    counts = [int(k) for k in args.lanes.split(",")]
    if not counts or min(counts) < 1:
        sys.exit(f"error: --lanes {args.lanes}: positive lane counts, e.g. 1,2,4")

    models, toks = [], []
    for _ in range(max(counts)):  # a copy per lane: its own weights, adapters, config (the sampler sets it) and tokenizer
        model, tok = load_model(args.model)
        if args.lora:
            for role in workflows.WORKFLOWS[args.workflow or "single"].roles:
                lora.add_adapter(model, role, rank=args.lora, alpha=args.lora / 2,
                                 generator=torch.Generator().manual_seed(0))
        models.append(model)
        toks.append(tok)
    device = next(models[0].parameters()).device
    problems = (load_problems(args.data, "math") if args.data else builtin_problems("math", "test"))[:args.prompts]
    stops = stop_ids(models[0], toks[0])

    def work(i, k):
        """Lane i of k: its part of the problems, seeded by i. Returns (tokens generated, a digest of all of them)."""
        model, tok, part = models[i], toks[i], split(problems, k)[i]
        gen = torch.Generator(device=device).manual_seed(i)
        if args.workflow is None:
            out = sampler.sample(model, [chat_ids(tok, q["prompt"]) for q in part], n=args.n,
                                 max_new_tokens=args.new_tokens, temperature=args.temperature, stop_ids=stops,
                                 pad_id=tok.pad_token_id, generator=gen)
            return sum(len(c.tokens) for c in out), hash(tuple(tuple(c.tokens) for c in out))
        roles = workflows.WORKFLOWS[args.workflow].roles
        policy = workflows.make_policy(model, tok, {r: r if args.lora else None for r in roles},
                                       max_new_tokens=args.new_tokens, temperature=args.temperature, generator=gen)
        eps = workflows.run_workflow(args.workflow, part, args.n, policy, grade=False)
        return sum(s[2] for s in policy.stages), hash(tuple(tuple(t.completion_ids) for e in eps for t in e.turns))

    print(f"{args.model}: {len(problems)} prompts x {args.n}, <= {args.new_tokens} new tokens, "
          f"{args.workflow or 'one sampler call'} per lane{f', LoRA rank {args.lora} per role' if args.lora else ''}, "
          f"{device}")
    if device.type == "cuda":  # Triton specialises an int argument equal to 1 or divisible by 16: compile those now
        for seed in (1, 16, 17):
            sampler.draw_fused(torch.zeros(2, 8, device=device, dtype=torch.bfloat16), args.temperature, seed)
    base = None
    with lanes_patched():
        for k in counts:
            lanes = Lanes(k, device)
            try:
                serial = [lanes.run(work, [i]) for i in range(k)]  # warm-up, one lane at a time: compiles, captures
                serial = [lanes.run(work, [i]) for i in range(k)]  # each lane alone, warm: the reference tokens
                runs = [lanes.run(work, range(k)) for _ in range(args.repeats)]
            finally:
                lanes.close()
            alone = sum(s for s, _ in serial)
            ref = [out[0] for _, out in serial]
            same = all([(t, d) for t, d, _ in out] == [(t, d) for t, d, _ in ref] for _, out in runs)
            median = statistics.median(s for s, _ in runs)
            base = base or (median if k == 1 else None)
            ratio = f", {median / base:.2f}x the 1-lane time" if base else ""
            print(f"lanes {k}: {median:.3f} s median at once ({', '.join(f'{s:.3f}' for s, _ in runs)}), "
                  f"{alone:.3f} s one after another; tokens {sum(t for t, _, _ in ref)}, "
                  f"{'the same' if same else 'NOT the same'} at once as alone; host CPU "
                  f"{statistics.median(sum(c for _, _, c in out) for _, out in runs):.3f} s{ratio}", flush=True)
    if device.type == "cuda":
        print(f"peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB (the largest lane count's)")


if __name__ == "__main__":
    main()
