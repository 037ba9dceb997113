"""Where the wall time of ONE sampler call goes (issue 15), for the shapes training steps produce.

A real `sampler.sample_fast` call is instrumented from outside (sampler.py is not changed). While an
instrumented call runs, these are wrapped, each wrapped part synchronising the device before and after
itself and recording host wall time:
  prefill        the model's (or its decoder's) forwards before the first draw, one per row chunk
  warm-up        a decode forward on a side stream: the eager step run right before a call's first graph capture
                 (the first forward at a new batch size / attended length: it may build cuDNN plans)
  capture        torch.cuda.graph: its enter (device sync, empty_cache, capture_begin), the recorded
                 forward, capture_end (instantiation); split in three below the table. A capture made with
                 CUDAGraph.capture_begin / capture_end directly is timed the same way (enter = capture_begin)
  replay         CUDAGraph.replay
  eager decode   a decode forward outside graphs (cuda_graph=False, the CPU path: no warm-ups, captures
                 or replays there)
  draw           sampler.draw_fused / sampler.pick, one per decode step
  compaction     StaticKV.keep (finished rows leave the batch)
  bookkeeping    the time between parts: prefill glue, index writes, stop checks, the host check every
                 `check_every` steps (shown separately: the part before the first draw)
  setup, tail    before the first part (left-padding, masks, the KV cache) and after the last one
                 (.tolist of the results, the Completion records)
setup + the timed parts + bookkeeping + tail = the call's total, by construction. The syncs serialise what a
plain call overlaps (the host queues draws and bookkeeping while the GPU replays), so an instrumented call
runs slower than a plain one: every instrumented call is shown beside a plain call of the same sizes, and
one of them beside the plain call of the same prompts.

Workloads (--data: a GSM8K-style JSONL, default the built-in problems; T = 0.7, one seed for every call):
  long-stop     --long-rows prompts of --long-len tokens (solved problems, then a new one and "reply with only
                the final answer"), <= --new-tokens, and EVERY token id a stop id: each row stops at its first
                token, but decoding goes on to the first host check (step check_every), as for a Voting
                aggregator whose rows all stop after 2 tokens. Setup and tail include building and reading
                that vocabulary-sized stop set (timed alone on the first line).
  long-2        prompts built the same way, max_new_tokens=2 (the rows are cut at 2 tokens: the loop ends with them).
  long-natural  prompts built the same way, natural stop, <= --new-tokens (a synthesizer-like stage).
  natural       --prompts GSM8K questions x --n samples, natural stop, <= --new-tokens (a rollout).
Per workload: a warm-up call (first shapes, Triton compile), then per --check-every value (sample_fast's
argument; 32 is the default there): plain on new prompts, instrumented on new prompts (another set of the
same sizes), then plain and instrumented on the warm-up's prompts. New prompts meet new shapes (prefill
length, batch sizes after compaction), as a training step does; the warm-up's prompts are one call, the
same for every check_every value (one seed: the same samples), with its prefill shapes seen before.

    python bench/breakdown.py                  # tiny model on CPU: a smoke run of the eager path
    python bench/breakdown.py --model /root/mdl/hf --data .campaign/data/gsm8k/test.jsonl   # H200, ~1.5 min
--lora RANK: the model's linear layers wrapped in a LoRA adapter and every call under `lora.merged`, as in training.
--attention sdpa: decoding through bench/sdpa.py's sdpa_attention (a contender) instead of the sampler's matmuls.
Left out: several repeats per call (each call once: the parts, not a mean, are the point), vLLM.
"""
import argparse
import contextlib
import functools
import json
import os
import random
import sys
import time

STARTED = time.perf_counter()  # before torch's import: the wall time printed at the end includes it
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from data import builtin_problems, load_problems  # noqa: E402
from models import chat_ids, load_model, stop_ids  # noqa: E402
import lora  # noqa: E402
import sampler  # noqa: E402

TIMED = ["prefill", "warm-up", "capture", "replay", "eager decode", "draw", "compaction"]  # wrapped parts
PARTS = ["setup", *TIMED, "bookkeeping", "tail"]  # they add up to the call's total
WORKLOADS = ["long-stop", "long-2", "long-natural", "natural"]  # the short-output calls first
REAL = dict(prompts=64, n=8, new_tokens=384, long_rows=128, long_len=[1000, 1500])  # the shapes of issue 15
TINY = dict(prompts=4, n=2, new_tokens=40, long_rows=6, long_len=[100, 200])  # a CPU smoke run in seconds
MISSING = object()


class Recorder:
    """The parts of one call: (name, start, end) in host seconds, each part synchronised on both sides."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.events = []
        self.inside = False  # a part is running: what it calls (the forward a capture records) is its time
        self.draws = 0  # forwards before the first draw are the prefill
        self.capture_split = dict.fromkeys(("enter", "record", "end"), 0.0)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def part(self, name):
        if self.inside:
            yield
            return
        self.sync()  # never inside a capture: the capture is a part, so its forward does not get here
        self.inside, start = True, time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.inside = False
            self.events.append((name, start, time.perf_counter()))
            self.draws += name == "draw"

    def forward_part(self):
        if self.draws == 0:
            return "prefill"
        side = self.cuda and torch.cuda.current_stream() != torch.cuda.default_stream()
        return "warm-up" if side else "eager decode"


@contextlib.contextmanager
def instrumented(model, rec):
    """Wraps what `sample_fast` calls (see the docstring), for the duration of the block; undone after."""
    def timed(fn, name=None):  # name None: the forward's part is chosen when it is called
        @functools.wraps(fn)  # keeps the signature: sampler.cache_kw inspects the forward's parameters
        def wrapper(*args, **kwargs):
            with rec.part(name or rec.forward_part()):
                return fn(*args, **kwargs)
        return wrapper

    class graph(torch.cuda.graph):  # sample_fast's `with torch.cuda.graph(g):`, timed in three pieces
        def __enter__(self):
            self._bench_part = rec.part("capture")
            self._bench_part.__enter__()
            t = time.perf_counter()
            try:
                super().__enter__()
            except BaseException:
                self._bench_part.__exit__(None, None, None)
                raise
            self._bench_t = time.perf_counter()
            rec.capture_split["enter"] += self._bench_t - t

        def __exit__(self, *exc):
            t = time.perf_counter()
            rec.capture_split["record"] += t - self._bench_t
            try:
                return super().__exit__(*exc)
            finally:
                rec.capture_split["end"] += time.perf_counter() - t
                self._bench_part.__exit__(None, None, None)

    begin, end = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.capture_end

    def capture_begin(g, *args, **kwargs):  # a capture started without torch.cuda.graph() (no wrapper part open)
        if not rec.inside:
            rec.open_capture = rec.part("capture")
            rec.open_capture.__enter__()
            t = time.perf_counter()
            begin(g, *args, **kwargs)
            rec.capture_t = time.perf_counter()
            rec.capture_split["enter"] += rec.capture_t - t
        else:
            begin(g, *args, **kwargs)

    def capture_end(g, *args, **kwargs):
        if (opened := getattr(rec, "open_capture", None)) is None:
            return end(g, *args, **kwargs)
        t = time.perf_counter()
        rec.capture_split["record"] += t - rec.capture_t
        try:
            return end(g, *args, **kwargs)
        finally:
            rec.capture_split["end"] += time.perf_counter() - t
            rec.open_capture = None
            opened.__exit__(None, None, None)

    patches = [(model, "forward", timed(model.forward)), (sampler, "draw_fused", timed(sampler.draw_fused, "draw")),
               (sampler, "pick", timed(sampler.pick, "draw")),
               (sampler.StaticKV, "keep", timed(sampler.StaticKV.keep, "compaction"))]
    if (decoder := model.get_decoder()) is not model:  # a prefill may call the decoder alone
        patches.append((decoder, "forward", timed(decoder.forward)))
    if rec.cuda:
        patches += [(torch.cuda, "graph", graph), (torch.cuda.CUDAGraph, "capture_begin", capture_begin),
                    (torch.cuda.CUDAGraph, "capture_end", capture_end),
                    (torch.cuda.CUDAGraph, "replay", timed(torch.cuda.CUDAGraph.replay, "replay"))]
    saved = [(obj, name, vars(obj).get(name, MISSING)) for obj, name, _ in patches]
    try:
        for obj, name, new in patches:
            setattr(obj, name, new)
        yield rec
    finally:
        for obj, name, old in saved:
            delattr(obj, name) if old is MISSING else setattr(obj, name, old)


def split(rec, start, end):
    """(parts in seconds, counts, bookkeeping before the first draw): setup, bookkeeping and tail fill the
    gaps between the recorded parts, so the parts sum to end - start."""
    parts, counts = dict.fromkeys(PARTS, 0.0), dict.fromkeys(TIMED, 0)
    for name, a, b in rec.events:
        parts[name] += b - a
        counts[name] += 1
    first, last = rec.events[0][1], rec.events[-1][2]
    parts["setup"], parts["tail"] = first - start, end - last
    parts["bookkeeping"] = (last - first) - sum(b - a for _, a, b in rec.events)
    first_draw = next(a for name, a, _ in rec.events if name == "draw")
    return parts, counts, first_draw - first - parts["prefill"]


def one_call(model, prompts, n, max_new_tokens, stops, pad_id, instrument, temperature=0.7, seed=0, **kw):
    """One sample_fast call, synchronised before and after -> a record: total, tokens, and with `instrument`
    its parts. Every call draws from a generator seeded `seed`: the same prompts give the same call."""
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    rec = Recorder(device)
    with instrumented(model, rec) if instrument else contextlib.nullcontext():
        rec.sync()
        start = time.perf_counter()
        out = sampler.sample_fast(model, prompts, n, max_new_tokens, temperature, stops, pad_id, gen, **kw)
        rec.sync()
        end = time.perf_counter()
    lengths = [len(c.tokens) for c in out]
    result = {"total": end - start, "tokens": sum(lengths), "max_len": max(lengths), "rows": len(out),
              "completions": [c.tokens for c in out]}
    if instrument:
        parts, counts, before = split(rec, start, end)
        result.update(parts=parts, counts=counts, bookkeeping_before_first_draw=before,
                      capture_split=dict(rec.capture_split))
    return result


def long_prompts(tok, pool, sizes, rows, lo, hi, s):
    """`rows` prompts of about lo..hi tokens (a length drawn per row, seeded by the set index s): solved problems
    one after another, then a new problem and an instruction to reply with only its final answer."""
    head, tail = "Here are some solved problems.\n\n", "\nReply with only the final answer, as \\boxed{N}."
    out = []
    for r in range(rows):
        rng = random.Random(f"long-{s}-{r}")
        target, i = rng.randint(lo, hi), rng.randrange(len(pool))
        last, used, solved = pool[i]["prompt"], sizes[i] + 40, []  # 40: about the template, head and tail
        while used + sizes[(i + 1 + len(solved)) % len(pool)] <= target and len(solved) < len(pool) - 1:
            j = (i + 1 + len(solved)) % len(pool)
            solved.append(f"Problem: {pool[j]['prompt']}\nAnswer: {pool[j]['answer']}")
            used += sizes[j]
        out.append(chat_ids(tok, head + "\n\n".join(solved) + f"\n\nProblem: {last}{tail}"))
    return out


def workloads(args, model, tok, problems):
    """name -> (what it is, prompts of set s -> (prompts, n), max_new_tokens, stop ids)."""
    stops = stop_ids(model, tok)
    sizes = [len(ids) for ids in tok([f"Problem: {p['prompt']}\nAnswer: {p['answer']}\n\n" for p in problems],
                                     add_special_tokens=False)["input_ids"]]
    lo, hi = args.long_len
    long = functools.lru_cache(lambda s: (long_prompts(tok, problems, sizes, args.long_rows, lo, hi, s), 1))
    natural = lambda s: ([chat_ids(tok, problems[(s * args.prompts + i) % len(problems)]["prompt"])
                          for i in range(args.prompts)], args.n)
    every = list(range(model.config.get_text_config().vocab_size))
    return {"long-stop": ("every token id a stop id (1 token per row; decoding runs to the first check)", long,
                          args.new_tokens, every),
            "long-2": ("max_new_tokens=2 (rows cut at 2 tokens)", long, 2, stops),
            "long-natural": ("natural stop", long, args.new_tokens, stops),
            "natural": ("natural stop", natural, args.new_tokens, stops)}


def report(model, tok, args):
    """Runs the calls of every chosen workload (module docstring) and prints them -> {workload: records}."""
    device = next(model.parameters()).device
    problems = load_problems(args.data, "math") if args.data else builtin_problems("math", "test", n=200)
    print(f"model={args.model} device={device} torch={torch.__version__} triton={sampler.triton is not None} "
          f"graphs={device.type == 'cuda'}; each call once, T={args.temperature}, seed 0", flush=True)
    print("instrumented calls synchronise the device around every part, which serialises host and GPU work that a "
          "plain call overlaps:\ntheir totals run higher; the plain calls are the real times.")
    if device.type != "cuda":
        print("CPU: the eager path (cuda_graph=False): 0 warm-ups, captures and replays; each decode step is an "
              "eager forward.")
    every = list(range(model.config.get_text_config().vocab_size))
    t = time.perf_counter()
    sampler._completions([[0]], [[0.0]], torch.tensor(sorted(set(every) | {tok.pad_token_id}), device=device), 1)
    print(f"(a stop set of all {len(every):,} ids: built and read back in {1e3 * (time.perf_counter() - t):.0f} ms "
          "on the host, in long-stop's setup and tail)")
    results, s = {}, 0  # s: the last prompt set used
    for name, (what, make, max_new, stops) in workloads(args, model, tok, problems).items():
        if name not in args.workloads:
            continue
        prompts, n = make(s)
        lengths = [len(p) for p in prompts]
        print(f"\n== {name}: {len(prompts) * n} rows ({len(prompts)} prompts x {n}), prompt tokens {min(lengths)}-"
              f"{max(lengths)} (mean {sum(lengths) / len(lengths):.0f}), <= {max_new} new tokens, {what}", flush=True)
        call = lambda s, ce, instrument: one_call(model, *make(s), max_new, stops, tok.pad_token_id, instrument,
                                                  args.temperature, check_every=ce)
        warm = s  # the warm-up's prompt set; each new set is another draw of the same sizes
        records = results[name] = {"warm-up": call(warm, args.check_every[0], False)}
        show("warm-up call (first shapes)", records["warm-up"])
        variants = args.check_every if max_new > min(args.check_every) else args.check_every[:1]
        for ce in variants:
            print(f"check_every={ce}" + ("" if len(variants) == len(args.check_every)
                                          else f" (no host check within {max_new} tokens: one value run)"))
            plan = [("plain, new prompts", s + 1, False), ("instrumented, new prompts", s + 2, True),
                    ("plain, the warm-up's prompts", warm, False), ("instrumented, the warm-up's prompts", warm, True)]
            for label, p, instrument in plan:
                records[f"{ce}: {label}"] = call(p, ce, instrument)
                show(label, records[f"{ce}: {label}"])
            table(records[f"{ce}: instrumented, new prompts"], records[f"{ce}: instrumented, the warm-up's prompts"])
            s += 2
        if len(variants) > 1:
            for kind in ("new prompts", "the warm-up's prompts"):
                times = [f"check_every={ce} {records[f'{ce}: plain, {kind}']['total']:.3f} s" for ce in variants]
                print(f"  plain, {kind}: " + ", ".join(times))
        s += 1  # the next workload's warm-up set
    return results


def show(label, r):
    print(f"  {label:36s} {r['total']:7.3f} s  {r['tokens']:7,d} tokens ({r['tokens'] / r['rows']:.1f}/row, max "
          f"{r['max_len']})", flush=True)


def table(new, again):
    """The two instrumented calls side by side: seconds (count, ms each) per part."""
    names = {"setup": "setup (pad, masks, KV cache)", "bookkeeping": "bookkeeping between parts",
             "tail": "tail (.tolist, completions)", "prefill": "prefill forwards", "warm-up": "graph warm-ups",
             "capture": "graph captures", "replay": "graph replays", "eager decode": "eager decode forwards",
             "draw": "draws", "compaction": "compactions"}
    def cell(r, k):
        if not r["counts"].get(k):
            return f"{r['parts'][k]:7.3f} s" + (" (   0)" if k in TIMED else "")
        return f"{r['parts'][k]:7.3f} s ({r['counts'][k]:4d} x {1e3 * r['parts'][k] / r['counts'][k]:7.1f} ms)"
    print(f"    {'part (instrumented calls)':30s} {'new prompts':34s} the warm-up's prompts")
    for k in PARTS:
        print(f"    {names[k]:30s} {cell(new, k):34s} {cell(again, k)}")
    print(f"    {'  before the first draw':30s} {new['bookkeeping_before_first_draw']:7.3f} s{'':25s} "
          f"{again['bookkeeping_before_first_draw']:7.3f} s")
    cap = lambda r: "/".join(f"{r['capture_split'][k]:.3f}" for k in ("enter", "record", "end"))
    if new["counts"]["capture"] or again["counts"]["capture"]:
        print(f"    {'  capture: enter/record/end s':30s} {cap(new):34s} {cap(again)}")
    print(f"    {'total':30s} {new['total']:7.3f} s{'':25s} {again['total']:7.3f} s", flush=True)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="tiny, a local folder, a hub name or a .gguf file")
    p.add_argument("--data", default=None, help="math JSONL for prompts (default: built-in problems)")
    p.add_argument("--workloads", nargs="+", default=WORKLOADS, choices=WORKLOADS, help="which calls to run")
    p.add_argument("--check-every", type=int, nargs="+", default=[32, 8], help="sample_fast's check_every values")
    p.add_argument("--prompts", type=int, default=None, help="natural: distinct prompts (default 64; tiny 4)")
    p.add_argument("--n", type=int, default=None, help="natural: samples per prompt (default 8; tiny 2)")
    p.add_argument("--new-tokens", type=int, default=None, help="max new tokens per row (default 384; tiny 40)")
    p.add_argument("--long-rows", type=int, default=None, help="long-*: rows, one prompt each (default 128; tiny 6)")
    p.add_argument("--long-len", type=int, nargs=2, default=None, help="long-*: prompt tokens lo hi (default 1000 "
                   "1500; tiny 100 200)")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (training's)")
    p.add_argument("--json", default=None, help="also write the records (no completions) to this file")
    p.add_argument("--fused", action="store_true", help="every call under bench/sampler.py's fused_layers (torch."
                   "compile'd norms, MLPs, rotary: 1.21-1.36x per call here, nineteenth session; docs/benchmarks.md)")
    p.add_argument("--lora", type=int, default=0, metavar="RANK", help="wrap the model's linear layers in a LoRA "
                   "adapter of this rank and run every call under lora.merged, as training's rollouts do (default: none)")
    p.add_argument("--attention", choices=("matmul", "sdpa"), default="matmul", help="the decode attention: sampler."
                   "gqa_attention (two matmuls) or bench/sdpa.py's sdpa_attention (a contender; default: matmul)")
    args = p.parse_args(argv)
    if args.lora < 0:
        p.error(f"--lora must be a rank >= 1 (0: none), got {args.lora}")
    for k, v in (TINY if args.model == "tiny" else REAL).items():  # unset sizes: the model's defaults
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def main(argv=None):
    args = parse(argv)
    start = time.perf_counter()
    model, tok = load_model(args.model)
    print(f"model loaded in {time.perf_counter() - start:.1f} s")
    if args.lora:  # as in training: every linear layer of the blocks a LoRA wrapper, the adapter folded in per call
        lora.add_adapter(model, "bench", rank=args.lora)
        lora.set_adapter(model, "bench")
        print(f"LoRA wrappers on: an adapter of rank {args.lora}, every call under lora.merged")
    from bench.sampler import decode_attention, fused_layers
    if args.attention == "sdpa":
        from bench.sdpa import sdpa_attention
        print("sdpa_attention on: every decode step's attention is SDPA's masked kernel, as before the matmuls")
    if args.fused:
        print("fused_layers on: the model's RMSNorms, MLPs and rotary run torch.compile'd copies in every call")
    with fused_layers(model) if args.fused else contextlib.nullcontext(), \
            decode_attention(sdpa_attention) if args.attention == "sdpa" else contextlib.nullcontext(), \
            lora.merged(model) if args.lora else contextlib.nullcontext():
        results = report(model, tok, args)
    print(f"\nwall time {time.perf_counter() - STARTED:.1f} s since the script started (imports, model load included)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({w: {k: {f: v for f, v in r.items() if f != "completions"} for k, r in recs.items()}
                       for w, recs in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
