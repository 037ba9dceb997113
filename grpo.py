"""GRPO pieces that work on tensors and role names: group advantages, per-token log-probs of a
turn's completion, per-role token weights, and the clipped policy loss.

The objective per token is PPO-clip with separate low / high clip and dual clip (as in the
reference, verl's "dual-clip PPO"), plus an optional k3 KL penalty to the base model whose
coefficient is per row (so per role). The batch loss is sum_i sum_t w_i * loss_it, where the
token weight w_i of row i comes from `token_weights` and is computed once for the whole optimizer
batch: micro-batches then only add up their part, so splitting never changes the loss or gradient.

Left out: entropy bonus and several PPO epochs (the reference uses neither), value functions,
reward models, sequence packing. No reference model is run unless a KL coefficient is > 0.
"""
from collections import defaultdict

import torch
from torch.utils.checkpoint import checkpoint

AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "role-balanced")


def group_advantages(keys, rewards, eps=1e-6, scale=True):
    """Advantage of each row within its group: (r - mean) / (std + eps), std unbiased as in verl.

    keys: one hashable group key per row, (problem id, instance name) in training. Rows of one
    group with equal rewards get 0. A group of one row also gets 0 (it has no baseline: giving it
    the raw reward would silently turn GRPO into REINFORCE without a baseline); the number of such
    rows is returned so the caller can log it. scale=False gives mean-only (Dr. GRPO style)."""
    groups = defaultdict(list)
    for i, k in enumerate(keys):
        groups[k].append(i)
    advantages = [0.0] * len(keys)
    singletons = 0
    for rows in groups.values():
        if len(rows) == 1:
            singletons += 1
            continue
        r = torch.tensor([float(rewards[i]) for i in rows], dtype=torch.float64)
        a = r - r.mean()  # exactly 0 when all rewards are equal
        if scale and a.abs().max() > 0:
            a = a / (r.std() + eps)
        for i, v in zip(rows, a.tolist()):
            advantages[i] = v
    return advantages, singletons


def token_weights(roles, lengths, mode="seq-mean-token-mean", role_weights=None):
    """Per-token weight of each row (every token of a row weighs the same) and each role's share.

    - "seq-mean-token-mean" (the reference): mean over a row's tokens, then mean over rows, so each
      row weighs 1/N whatever its length and a role's share is its fraction of the rows.
    - "token-mean": every token in the batch weighs the same; a role's share is its token fraction.
    - "role-balanced": each role type gets 1/R of the total, split seq-mean-token-mean inside it.
    role_weights {role: factor} then scales each role's weights, and the total is renormalised to 1
    so only the shares move, not the overall step size. Rows with no tokens weigh 0.
    Returns (weights: list[float], shares: dict role -> total weight)."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose from {AGGREGATIONS}")
    live = [i for i, n in enumerate(lengths) if n > 0]
    weights = [0.0] * len(lengths)
    if not live:
        return weights, {}
    per_role = defaultdict(int)
    for i in live:
        per_role[roles[i]] += 1
    total_tokens = sum(lengths[i] for i in live)
    for i in live:
        if mode == "seq-mean-token-mean":
            weights[i] = 1.0 / (len(live) * lengths[i])
        elif mode == "token-mean":
            weights[i] = 1.0 / total_tokens
        else:
            weights[i] = 1.0 / (len(per_role) * per_role[roles[i]] * lengths[i])
        if role_weights:
            weights[i] *= role_weights.get(roles[i], 1.0)
    total = sum(weights[i] * lengths[i] for i in live)
    if total <= 0:
        raise ValueError(f"role weights {role_weights} leave no weight on the batch")
    weights = [w / total for w in weights]
    shares = defaultdict(float)
    for i in live:
        shares[roles[i]] += weights[i] * lengths[i]
    return weights, dict(shares)


def micro_batches(lengths, token_budget):
    """Split row indices into micro-batches whose padded size (rows x longest row) stays within
    token_budget; rows sorted by length so little is padding. A row longer than the budget
    goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[current[0]] > token_budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def _chunk_logprobs(head, hidden, targets, temperature):
    """fp32 log-softmax of one chunk of positions, returning only the target tokens' log-probs
    (N,) and the entropies (N,). Called under checkpoint, so the (N, V) logits are not kept."""
    logits = head(hidden).float() / temperature
    logp = torch.log_softmax(logits, -1)
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, targets[:, None])[:, 0], entropy


def completion_logprobs(model, prompts, completions, temperature=1.0, chunk_tokens=4096):
    """Log-prob and entropy of every completion token given its prompt, under the model's current
    adapter: one right-padded forward pass over prompt + completion (B, L), then the LM head and an
    fp32 log-softmax only at the completion positions, chunk_tokens at a time (each chunk
    recomputed in backward rather than storing (tokens, vocab) fp32 logits). Logits are divided by
    the sampling temperature, as the sampler does. Returns two lists of (len(completion),) tensors."""
    device = next(model.parameters()).device
    seqs = [p + c for p, c in zip(prompts, completions)]
    ids = torch.zeros((len(seqs), max(map(len, seqs))), dtype=torch.long)
    rows, cols, targets = [], [], []
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, :len(seqs[i])] = torch.tensor(seqs[i])
        rows += [i] * len(c)
        cols += range(len(p) - 1, len(p) + len(c) - 1)  # position t predicts token t + 1
        targets += c
    # No attention mask: with right padding, causal attention already keeps every real token from
    # seeing the pads after it, and without an explicit mask SDPA runs its fused causal kernels
    # instead of materialising (rows, heads, L, L) attention weights for backward.
    hidden = model.base_model(input_ids=ids.to(device)).last_hidden_state
    hidden = hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]  # (N, H)
    targets = torch.tensor(targets, device=device)
    head = model.get_output_embeddings()
    logps, entropies = [], []
    for s in range(0, len(targets), chunk_tokens):
        args = (head, hidden[s:s + chunk_tokens], targets[s:s + chunk_tokens], temperature)
        lp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False) if torch.is_grad_enabled() \
            else _chunk_logprobs(*args)
        logps.append(lp)
        entropies.append(ent)
    sizes = [len(c) for c in completions]
    return list(torch.cat(logps).split(sizes)), list(torch.cat(entropies).split(sizes))


def token_loss(logprobs, old_logprobs, advantages, clip_low=0.2, clip_high=0.28, dual_clip=3.0,
               ref_logprobs=None, kl_coef=None):
    """Per-token loss (N,), with every argument a flat (N,) tensor (advantages and kl_coef repeated
    over each row's tokens). Returns (loss, clipped, kl): clipped marks tokens where the clip
    changed the objective (so their gradient is zero), kl is the k3 estimate (zeros without a ref).

    PPO-clip: max(-A r, -A clip(r, 1 - low, 1 + high)); dual clip: for A < 0 the loss is capped at
    -A * dual_clip so one very unlikely token with a huge ratio cannot dominate (dual_clip 0: off)."""
    # clamped as verl does: exp(100) would be inf, and 0 * inf = NaN reaches the gradient even where
    # the clip has made the loss constant
    ratio = torch.exp((logprobs - old_logprobs).clamp(-20.0, 20.0))
    unclipped = -advantages * ratio
    clipped_obj = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped_obj)
    clipped = clipped_obj > unclipped
    if dual_clip:
        cap = -advantages * dual_clip
        capped = (advantages < 0) & (loss > cap)
        loss = torch.where(capped, cap, loss)
        clipped = clipped | capped
    kl = torch.zeros_like(loss)
    if ref_logprobs is not None:
        d = (ref_logprobs - logprobs).clamp(-20, 20)
        kl = (d.exp() - d - 1).clamp(max=10)  # k3: unbiased, always >= 0 (verl's low_var_kl)
        loss = loss + kl_coef * kl
    return loss, clipped, kl
