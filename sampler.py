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

Left out here: the CUDA fast path (static cache, CUDA graphs) lives in `sample_fast` below when
present; beam search, repetition penalties and speculative decoding are not needed for GRPO.
"""
import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache


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
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            ids[i, L - len(p):] = torch.tensor(p)
            mask[i, L - len(p):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def pick(logits, temperature, top_k, top_p, generator):
    """Draw one token per row from fp32 `logits` (B, V). Returns (tokens (B,), logprobs (B,))."""
    if temperature == 0:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]
    scaled = logits / temperature
    logprobs = torch.log_softmax(scaled, -1)
    if top_k and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = scaled.sort(-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the tokens ranked above it already reach top_p (the first always stays)
        drop = probs.cumsum(-1) - probs >= top_p
        scaled = scaled.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    tokens = torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]
    return tokens, logprobs.gather(-1, tokens[:, None])[:, 0]


@torch.no_grad()
def sample(model, prompts, n=1, max_new_tokens=256, temperature=1.0, top_p=1.0, top_k=0,
           stop_ids=(), pad_id=0, generator=None, min_new_tokens=0):
    """Sample n completions for each prompt (a list of token-id lists).

    Returns P * n Completions, prompt-major (row i*n + j is sample j of prompt i). `generator`
    (a torch.Generator on the model's device) makes sampling reproducible; greedy when
    temperature == 0. `min_new_tokens` masks the stop ids until that many tokens exist (used by
    benchmarks to force a fixed length, as `generate(min_new_tokens=...)` does)."""
    device = next(model.parameters()).device
    rows = [p for p in prompts for _ in range(n)]
    if not rows:
        return []
    if any(len(p) == 0 for p in rows):
        raise ValueError("empty prompt: every prompt needs at least one token")
    stops = torch.tensor(sorted(set(stop_ids) | {pad_id}), device=device)
    ids, mask, positions = left_pad(rows, pad_id, device)
    cache = DynamicCache(config=model.config)
    kw = {cache_kw(model): cache, "use_cache": True}
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1,
                   **kw).logits[:, -1]
    positions = positions[:, -1:]
    active = torch.arange(len(rows), device=device)  # original row index of each batch row
    out_tokens, out_logprobs = [[] for _ in rows], [[] for _ in rows]
    finish = ["length"] * len(rows)
    for step in range(max_new_tokens):
        logits = logits.float()
        if step < min_new_tokens:
            logits[:, stops] = float("-inf")
        tokens, logprobs = pick(logits, temperature, top_k, top_p, generator)
        stopped = torch.isin(tokens, stops)
        for r, t, lp, s in zip(active.tolist(), tokens.tolist(), logprobs.tolist(), stopped.tolist()):
            out_tokens[r].append(t)
            out_logprobs[r].append(lp)
            if s:
                finish[r] = "stop"
        if step == max_new_tokens - 1:
            break
        if stopped.any():  # compact: finished rows leave the batch and the cache
            keep = (~stopped).nonzero()[:, 0]
            if len(keep) == 0:
                break
            cache.batch_select_indices(keep)
            active, tokens, mask, positions = active[keep], tokens[keep], mask[keep], positions[keep]
        mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
        positions = positions + 1
        logits = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions,
                       **kw).logits[:, -1]
    return [Completion(i // n, out_tokens[i], out_logprobs[i], finish[i]) for i in range(len(rows))]
