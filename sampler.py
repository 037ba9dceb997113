"""Batched sampling with a KV cache over a plain Hugging Face causal LM.

`sample(model, prompts, n=...)` takes token-id prompts of different lengths, left-pads them into
one batch (attention mask + position ids from the mask), prefills once, then decodes token by
token with the model's own DynamicCache. Each of the P x n rows stops at a stop id or at
`max_new_tokens`; finished rows are dropped from the batch (and from the cache) so they stop
costing compute. Returns, per row, the completion ids (ending with the stop id when it stopped),
the log-prob of every sampled token, and the finish reason ("stop" or "length").

Log-probs are taken under the distribution the token was drawn from *before* top-k / top-p
truncation, i.e. log_softmax(logits / temperature) (temperature 1 for greedy). grpo.py computes
the training log-probs the same way, so at the sampling weights they agree (see tests).
The pad id always counts as a stop id, so padding can never appear inside a completion.

`sample_fast` is the GPU path (used by `sample` on CUDA when there is no top-k / top-p): a
preallocated KV cache, the decode step captured as a CUDA graph (one per batch size and attended
length bucket), decode attention as two batched matmuls that read each key/value head once for its whole
query group (HF's SDPA path copies the cache per query head when a mask is present), sampling in one
Triton kernel with no host synchronisation per token (`draw_fused`), and the batch compacted when many rows are done.
Tried and dropped (docs/benchmarks.md): torch.compile of the whole decode step (two minutes of compiling,
no faster on rollouts that stop at EOS) and of the decoder's norms, MLPs and rotary only (bench/sampler.py's
fused_layers: half the kernels; 1.14x on a natural-stop call of 512 rows but 4% on an Orch-Workers step, twentieth
session: not worth its 21 lines).
It gives the simple path's greedy tokens (allowing for bf16 ties) and samples from the same
distribution (tests/test_sampler.py).

Left out: beam search, repetition penalties, speculative decoding, paged attention.
"""
import contextlib
import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache

from grpo import output_head


@dataclass
class Completion:
    prompt_index: int        # which prompt of the call this row continues
    tokens: list[int]        # sampled ids, the stop id included when finish == "stop"
    logprobs: list[float]    # log p(token) under log_softmax(logits / temperature), one per token
    finish: str              # "stop" or "length"


def cache_kw(model):
    """The forward() argument that takes the KV cache: `cache` in recent transformers,
    `past_key_values` before (transformers 5.17 on the GPU machine)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def left_pad(prompts, pad_id, device):
    """(ids, mask, positions), each (B, L): prompts right-aligned, positions counted from each
    row's first real token so a padded row sees the same positions as it would alone."""
    if not all(prompts):
        raise ValueError("empty prompt: every prompt needs at least one token")
    L = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (L - len(p)) + list(p) for p in prompts], dtype=torch.long)
    mask = (torch.arange(L) >= L - torch.tensor([len(p) for p in prompts])[:, None]).long()
    return ids.to(device), mask.to(device), (mask.cumsum(-1) - 1).clamp(min=0).to(device)  # positions: from the mask


def pick(logits, temperature, top_k, top_p, generator):
    """Draw one token per row from fp32 `logits` (B, V). Returns (tokens (B,), logprobs (B,)). Greedy when
    temperature == 0: the argmax of the logits, its log-prob at temperature 1 (top-k / top-p change neither)."""
    scaled = logits / (temperature or 1.0)  # x / 1.0 is exact: greedy log-probs are those of the logits
    logprobs = torch.log_softmax(scaled, -1)
    if top_k and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = scaled.sort(-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p  # the tokens ranked above it already reach top_p
        drop[:, 0] = False  # the most likely token always stays (top_p = 0 is greedy, not NaN)
        scaled = scaled.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    tokens = torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0] if temperature else logits.argmax(-1)
    return tokens, logprobs.gather(-1, tokens[:, None])[:, 0]


@torch.no_grad()
def sample(model, prompts, n=1, max_new_tokens=256, temperature=1.0, top_p=1.0, top_k=0,
           stop_ids=(), pad_id=0, generator=None, min_new_tokens=0, fast=None):
    """Sample n completions for each prompt (a list of token-id lists).

    Returns P * n Completions, prompt-major (row i*n + j is sample j of prompt i). `generator`
    (a torch.Generator on the model's device) makes sampling reproducible; greedy when
    temperature == 0. `min_new_tokens` masks the stop ids until that many tokens exist (used by
    benchmarks to force a fixed length, as `generate(min_new_tokens=...)` does). `fast` picks
    sample_fast (default: on CUDA when top_k and top_p are off)."""
    device = next(model.parameters()).device
    if fast is None:  # the fast path builds full-attention masks only (no sliding-window layers)
        layer_types = getattr(model.config.get_text_config(), "layer_types", None) or ["full_attention"]
        fast = device.type == "cuda" and top_p >= 1.0 and not top_k and set(layer_types) == {"full_attention"}
    if fast:
        return sample_fast(model, prompts, n, max_new_tokens, temperature, stop_ids, pad_id, generator, min_new_tokens)
    if not (rows := [p for p in prompts for _ in range(n)]):
        return []
    ids, mask, positions = left_pad(rows, pad_id, device)  # raises on an empty prompt
    stops = torch.tensor(sorted(set(stop_ids) | {pad_id}), device=device)
    cache = DynamicCache(config=model.config)
    kw = {cache_kw(model): cache, "use_cache": True}
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1, **kw).logits[:, -1]
    positions = positions[:, -1:]
    active = torch.arange(len(rows), device=device)  # original row index of each batch row
    # each row's draws (int64, filled with pad ids) and log-probs (float32), on the device: no copy per step
    out_tok, out_lp = (torch.full((len(rows), max_new_tokens), v, device=device) for v in (pad_id, 0.0))
    for step in range(max_new_tokens):
        logits = logits.float()
        if step < min_new_tokens:
            logits[:, stops] = float("-inf")
        tokens, logprobs = pick(logits, temperature, top_k, top_p, generator)
        keep = (~torch.isin(tokens, stops)).nonzero()[:, 0]  # the rows that did not stop (one host sync)
        out_tok[active, step], out_lp[active, step] = tokens, logprobs
        if step == max_new_tokens - 1 or len(keep) == 0:
            break
        if len(keep) < len(active):  # compact: finished rows leave the batch and the cache
            cache.batch_select_indices(keep)
            active, tokens, mask, positions = active[keep], tokens[keep], mask[keep], positions[keep]
        mask, positions = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1), positions + 1  # the new token's slot
        logits = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions, **kw).logits[:, -1]
    return _completions(out_tok.tolist(), out_lp.tolist(), stops, n)  # a row's draws after its stop are dropped


def _completions(tokens, logprobs, stops, n):
    """Completions from each row's sampled ids and log-probs (lists): a row ends at its first stop id, with
    finish "stop" (what a done row drew after it is dropped), else it ran to the length limit."""
    stop_set = set(stops.tolist())
    ends = [next((j + 1 for j, t in enumerate(row) if t in stop_set), None) for row in tokens]  # None: no stop
    return [Completion(i // n, tokens[i][:e], logprobs[i][:e], "stop" if e else "length") for i, e in enumerate(ends)]


# ------------------------------------------------------------------------------------------------
# The fast path.

class StaticKV:
    """Preallocated key/value buffers (rows, kv_heads, length, head_dim) per layer, written at
    `self.pos` (a device tensor, so a captured CUDA graph reads the current value). Attention sees
    the first `self.length` slots only, grown in buckets as decoding goes, so early steps do not
    read the empty tail. It answers the two calls an HF decoder makes: update(), get_seq_length()."""

    def __init__(self, config, rows, length, device, dtype):
        config = config.get_text_config()
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (rows, config.num_key_value_heads, length, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.steps = torch.arange(length, device=device)
        # the batch uses rows [first:first+rows] (compaction shrinks it); attention reads slots [:length]
        self.first, self.rows, self.length = 0, rows, length

    def update(self, key, value, layer_idx, *args, **kwargs):
        # the new tokens' slots: a decode step's one token at pos (a view: no kernel per layer); the prefill at 0
        where = self.pos.view(1) if key.shape[2] == 1 else self.steps[:key.shape[2]]
        k = self.k[layer_idx][self.first:self.first + self.rows].index_copy_(2, where, key)  # into the buffer (a view)
        v = self.v[layer_idx][self.first:self.first + self.rows].index_copy_(2, where, value)
        return k[:, :, :self.length], v[:, :, :self.length]

    def get_seq_length(self, layer_idx=0):
        return int(self.pos)

    def keep(self, index, *others):
        """Move rows `index` (device tensor) to the front, in the cache and in `others` (the call's other per-row
        buffers); the batch becomes len(index) rows."""
        for buf in [*self.k, *self.v, *others]:
            buf[:len(index)] = buf[index]
        self.rows = len(index)


def gqa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The fast path's decode attention: query (B, H, q, D), key/value (B, Hkv, L, D), a bool mask (B, 1, q, L) with
    True = attend. The G = H / Hkv query heads of one key/value head (heads j*G..j*G+G-1, HF's repeat_kv order) are
    folded into the query axis, (B * Hkv, G*q, D), so each cached head is read once and nothing is copied. Two batched
    matmuls around a softmax: the scores come out in fp32 (bmm's out_dtype on CUDA, torch 2.11+; an fp32 matmul
    elsewhere) as SDPA's kernels keep them, the masked softmax runs in fp32, and the probabilities are rounded to the
    values' dtype for the second matmul, as flash attention rounds them. Not SDPA: with cuDNN attention off
    (models.load_model) its masked kernel on the H200 is the memory-efficient one, which is not made for one query
    per row: 1.0-4.2x slower than these matmuls at 8-768 rows x 256-2,048 slots (one shape once 0.99x), and whole
    rollout calls 1.01-1.06x slower (16 x 8 GSM8K prompts; 128 long prompts x 384 tokens) (docs/benchmarks.md;
    bench/sdpa.py keeps SDPA as a contender). Returns (B, q, H, D) as HF's attention functions do."""
    (B, H, q, D), (_, Hkv, L, _) = query.shape, key.shape
    g = H // Hkv
    mask = attention_mask[:, :, None].expand(B, 1, g, q, L).reshape(B, 1, g * q, L)
    qs, ks = query.reshape(B * Hkv, g * q, D), key.reshape(B * Hkv, L, D).transpose(1, 2)
    half = qs.is_cuda and qs.dtype in (torch.bfloat16, torch.float16)  # bmm's out_dtype: CUDA, 16-bit inputs
    s = torch.bmm(qs, ks, out_dtype=torch.float32) if half else torch.bmm(qs.float(), ks.float())
    s = torch.where(mask, s.view(B, Hkv, g * q, L) * (D ** -0.5 if scaling is None else scaling), float("-inf"))
    out = torch.bmm(s.softmax(-1).to(value.dtype).view(B * Hkv, g * q, L), value.reshape(B * Hkv, L, D))
    return out.view(B, H, q, D).transpose(1, 2), None


AttentionInterface.register("gqa_static", gqa_attention)


try:  # Triton ships with CUDA builds of PyTorch; without it the fast path draws with `pick`
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:
    @triton.jit
    def _draw_kernel(logits, stride, V, inv_t, seed, out_tok, out_lp, GREEDY: tl.constexpr, BLOCK: tl.constexpr):
        """One row per program, one pass over the vocabulary: a running log-sum-exp of x = logit / T
        and a running argmax of x + Gumbel noise (philox keyed by `seed`, a distinct counter for every
        4 columns of every row)."""
        row = tl.program_id(0)
        base = logits + row.to(tl.int64) * stride
        m, s = tl.full((), -1e30, tl.float32), tl.full((), 0.0, tl.float32)
        best, best_i, best_x = tl.full((), -float("inf"), tl.float32), tl.full((), 0, tl.int32), tl.full((), 0.0, tl.float32)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            ok = cols < V
            x = tl.load(base + cols, mask=ok, other=-float("inf")).to(tl.float32) * inv_t
            m_new = tl.maximum(m, tl.max(x, 0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m = m_new
            y = x
            if not GREEDY:  # philox gives 4 numbers per call: one call per 4 columns
                first = (row.to(tl.int64) * tl.cdiv(V, BLOCK) * BLOCK + start) // 4  # int64: no wrap at 14k rows
                r0, r1, r2, r3 = tl.randint4x(seed, first + tl.arange(0, BLOCK // 4))
                r = tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (BLOCK,))
                u = tl.random.uint_to_uniform_float(r)
                y = tl.where(ok, x - tl.log(-tl.log(u)), -float("inf"))
            i = tl.argmax(y, 0)
            y_i = tl.max(y, 0)
            x_i = tl.sum(tl.where(cols == start + i, x, 0.0), 0)
            better = y_i > best  # strict: ties keep the lowest index, as torch.argmax does
            best, best_i, best_x = tl.where(better, y_i, best), tl.where(better, start + i, best_i), tl.where(better, x_i, best_x)
        tl.store(out_tok + row, best_i.to(tl.int64))
        tl.store(out_lp + row, best_x - m - tl.log(s))


def draw_fused(logits, temperature, seed):
    """Sample on the device without host sync, in one Triton kernel that reads the (bf16) logits once: the
    argmax of log p + Gumbel noise (the Gumbel-max trick) draws exactly from softmax(logits / T). `seed` (an
    int, a new one each step) keys the noise. Returns (tokens, log-probs at temperature T), as `pick` does
    (the same distribution; greedy gives the same tokens: tests/test_sampler.py)."""
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    rows, V = logits.shape
    tokens = torch.empty(rows, dtype=torch.long, device=logits.device)
    logprobs = torch.empty(rows, dtype=torch.float32, device=logits.device)
    _draw_kernel[(rows,)](logits, logits.stride(0), V, 1.0 / (temperature or 1.0), seed, tokens, logprobs,
                          GREEDY=temperature == 0, BLOCK=4096, num_warps=8)
    return tokens, logprobs


# device -> [side stream, last graph] of every CUDA-graph capture of this process: each capture goes into the first
# one's memory pool, kept alive by holding the last graph (a bare MemPool trips an assert of the pinned-memory
# allocator in torch 2.11). A new pool per capture (and a new stream per call) made the allocator reserve new address
# space each time under expandable segments (1.125x the GPU's memory each, given back only when the cache is emptied):
# training died after ~35 Voting steps with "CUDA driver error: out of memory" (docs/results.md). One pool is safe:
# a graph is never replayed after the next capture (it is dropped first), and what it holds, a later capture may reuse.
_CAPTURE = {}


@torch.no_grad()
def sample_fast(model, prompts, n=1, max_new_tokens=256, temperature=1.0, stop_ids=(), pad_id=0, generator=None,
                min_new_tokens=0, cuda_graph=None, check_every=32, bucket=128, prefill_tokens=2**17, tail_slots=2**16):
    """`sample` for the GPU (same arguments and result, no top-k / top-p). cuda_graph defaults to
    True on CUDA; False runs the same code eagerly (how the CPU tests check it). Every
    `check_every` tokens the host looks once at how many rows are done: it stops when all are, and
    compacts the batch (a new graph for the smaller batch) when at most half are still running.
    Attention reads the cache up to the next multiple of `bucket` slots (a new graph per bucket), or all
    of it once the running rows' whole cache is at most `tail_slots` slots (reading it costs little then,
    and no more graphs are captured for new buckets).
    The prefill runs right-padded with no mask, in row chunks of at most `prefill_tokens` padded tokens."""
    device = next(model.parameters()).device
    cuda_graph = device.type == "cuda" if cuda_graph is None else cuda_graph
    if not (rows := [p for p in prompts for _ in range(n)]):
        return []
    # right-padded: under plain causal attention a row's tokens never see the pads after them, so the prefill
    # needs no mask (HF's SDPA attention, which then runs SDPA causal); the pads' cache slots are masked out
    # while decoding
    if not all(rows):
        raise ValueError("empty prompt: every prompt needs at least one token")
    B, Lp = len(rows), max(map(len, rows))
    ids = torch.tensor([p + [pad_id] * (Lp - len(p)) for p in rows], device=device)
    last = torch.tensor([len(p) - 1 for p in rows], device=device)  # each row's last prompt token
    stops = torch.tensor(sorted(set(stop_ids) | {pad_id}), device=device)
    cache = StaticKV(model.config, B, Lp + max_new_tokens, device, model.get_input_embeddings().weight.dtype)
    mask = F.pad((torch.arange(Lp, device=device) <= last[:, None])[:, None, None, :], (0, max_new_tokens))  # (B, 1, 1, L)
    cache.length = Lp
    decoder, head = model.get_decoder(), output_head(model)
    kw = {cache_kw(model): cache, "use_cache": True}
    chunk = max(1, prefill_tokens // Lp)  # rows per prefill forward
    patches = contextlib.ExitStack()  # what the call changes, undone when it ends (also on an error)
    patches.callback(setattr, model.config, "_attn_implementation", model.config._attn_implementation)
    model.config._attn_implementation = "sdpa"  # the prefill: no mask, so plain causal attention (flash on CUDA)
    if device.type == "cuda":  # graphs and Triton launch on the current device: make it the model's
        patches.callback(torch.cuda.set_device, torch.cuda.current_device())
        torch.cuda.set_device(device)
    with patches:
        logits = []
        for a in range(0, B, chunk):
            cache.first, cache.rows = a, min(chunk, B - a)
            hidden = decoder(input_ids=ids[a:a + chunk], attention_mask={"full_attention": None}, **kw).last_hidden_state
            logits.append(head(hidden[torch.arange(len(hidden), device=device), last[a:a + chunk]]))
        logits = torch.cat(logits)
        cache.first, cache.rows = 0, B
        model.config._attn_implementation = "gqa_static"  # decoding: the masked attention of gqa_attention
        tok_in, pos_in = torch.zeros(B, 1, dtype=torch.long, device=device), last[:, None].clone()
        # each row's draws (int64, filled with pad ids) and log-probs (float32)
        out_tok, out_lp = (torch.full((B, max_new_tokens), v, device=device) for v in (pad_id, 0.0))
        done = torch.zeros(B, dtype=torch.bool, device=device)
        active = torch.arange(B, device=device)  # original row of each batch row
        step_fn = lambda: model(input_ids=tok_in[:cache.rows], position_ids=pos_in[:cache.rows], **kw, attention_mask={
            "full_attention": mask[:cache.rows, :, :, :cache.length]}).logits[:, -1]
        held = cuda_graph and (_CAPTURE.get(device) or _CAPTURE.setdefault(device, [torch.cuda.Stream(device), None]))
        graph, warmed = None, False
        # fused: one seed per step for draw_fused's noise, all drawn now (one host sync)
        if fused := triton is not None and device.type == "cuda":
            seeds = torch.randint(2**31 - 1, (max_new_tokens,), generator=generator, device=device).tolist()
        for t in range(max_new_tokens):
            if t < min_new_tokens:
                logits[:, stops] = float("-inf")
            tok, lp = draw_fused(logits, temperature, seeds[t]) if fused else \
                pick(logits.float(), temperature, 0, 1.0, generator)
            out_tok[active, t], out_lp[active, t] = tok, lp
            done[active] |= torch.isin(tok, stops)
            if t == max_new_tokens - 1:
                break
            # the only host synchronisation in the loop: every check_every tokens, and after 1, 2, 4, 8, ... tokens
            # ((t + 1) & t == 0: a power of two), so that a call whose rows all stop early ends early
            if (t + 1) % check_every == 0 or (t + 1) & t == 0:
                running = (~done[active]).nonzero()[:, 0]
                if len(running) == 0:
                    break
                if len(running) <= cache.rows // 2:
                    cache.keep(running, mask, pos_in)
                    active, tok = active[running], tok[running]
                    graph = None  # recaptured for the smaller batch
            b = cache.rows
            tok_in[:b, 0] = tok
            mask[:b, 0, 0, Lp + t] = True
            pos_in[:b] += 1
            cache.pos.fill_(Lp + t)
            # attend to the running rows' whole cache once it is small (one last capture), else grow the window when
            # the new token's slot is past it, with >= check_every slots ahead (no second capture right after the first)
            tail = b * (full := Lp + max_new_tokens) <= tail_slots
            if Lp + t + 1 > cache.length or (graph is None and tail):
                cache.length = full if tail else min(full, (Lp + t + check_every + bucket) // bucket * bucket)
                graph = None
            if not cuda_graph:
                logits = step_fn()
            elif graph is None:  # capture on a side stream; the call's first capture warms up first (step t's forward)
                held[0].wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(held[0]):
                    if warm := not warmed:  # an eager step first: lazy initialisation stays out of the capture
                        logits, warmed = step_fn(), True
                    graph = torch.cuda.CUDAGraph()
                    # not torch.cuda.graph(): it syncs and empties the allocator's cache
                    graph.capture_begin(held[1].pool() if held[1] else None)
                    graph_logits = step_fn()
                    graph.capture_end()
                    held[1] = graph
                    if not warm:  # step t's forward is the new graph's first replay
                        graph.replay()
                        logits = graph_logits
                torch.cuda.current_stream().wait_stream(held[0])
            else:
                graph.replay()
                logits = graph_logits
    return _completions(out_tok.tolist(), out_lp.tolist(), stops, n)
