"""GRPO pieces that work on tensors and role names: group advantages, per-token log-probs of a
turn's completion, per-role token weights, and the clipped policy loss.

The objective per token is PPO-clip with separate low / high clip and dual clip (as in the
reference, verl's "dual-clip PPO"), plus an optional k3 KL penalty to the base model whose
coefficient is per row (so per role). The batch loss is sum_i sum_t w_i * loss_it, where the
token weight w_i of row i comes from `token_weights` and is computed once for the whole optimizer
batch: micro-batches then only add up their part, so splitting never changes the loss or gradient.
Log-probs apply the LM head to the hidden states of completion positions only, plus the logit
post-processing of Gemma-2/3 (soft-cap), Granite and Cohere (scales) that the model's forward, and
so the sampler, applies (`output_head`); `check_logits` refuses a model whose forward does more.

Left out: entropy bonus and several PPO epochs (the reference uses neither), value functions,
reward models, sequence packing. No reference model is run unless a KL coefficient is > 0.
"""
from collections import Counter, defaultdict
from functools import partial

import torch
from torch.utils.checkpoint import checkpoint

AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "role-balanced")


def group_advantages(keys, rewards, eps=1e-6, scale=True):
    """Advantage of each row within its group: (r - mean) / (std + eps), std unbiased as in verl.

    keys: one hashable group key per row, (problem id, instance name) in training. Rows of one
    group with equal rewards get 0. A group of one row also gets 0 (it has no baseline: giving it
    the raw reward would silently turn GRPO into REINFORCE without a baseline); the number of such
    rows is returned so the caller can log it. scale=False gives mean-only (Dr. GRPO style)."""
    groups, advantages = defaultdict(list), {}  # key -> row indices; row index -> advantage (every row in one group)
    for i, k in enumerate(keys):
        groups[k].append(i)
    for rows in groups.values():  # a group of one: a = 0 below, so no baseline-free reward slips through
        r = torch.tensor([float(rewards[i]) for i in rows], dtype=torch.float64)
        a = r - r.mean()  # exactly 0 when all rewards are equal
        if scale and a.abs().max() > 0:
            a = a / (r.std() + eps)
        advantages.update(zip(rows, a.tolist()))
    return [advantages[i] for i in range(len(keys))], sum(len(rows) == 1 for rows in groups.values())


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
    live, weights = [i for i, n in enumerate(lengths) if n > 0], [0.0] * len(lengths)
    if not live:
        return weights, {}
    per_role, total_tokens = Counter(roles[i] for i in live), sum(lengths[i] for i in live)
    # a row's tokens weigh 1 / tokens_per_weight(i) by mode (the docstring's list), then times its role weight
    tokens_per_weight = {"seq-mean-token-mean": lambda i: len(live) * lengths[i], "token-mean": lambda i: total_tokens,
                         "role-balanced": lambda i: len(per_role) * per_role[roles[i]] * lengths[i]}[mode]
    for i in live:  # x 1.0 is exact: no role weights, no change
        weights[i] = 1.0 / tokens_per_weight(i) * (role_weights or {}).get(roles[i], 1.0)
    if (total := sum(weights[i] * lengths[i] for i in live)) <= 0:
        raise ValueError(f"role weights {role_weights} leave no weight on the batch")
    weights = [w / total for w in weights]
    return weights, {role: sum(weights[i] * lengths[i] for i in live if roles[i] == role) for role in per_role}


def micro_batches(lengths, token_budget):
    """Split row indices into micro-batches whose padded size (rows x longest row) stays within
    token_budget; rows sorted by length so little is padding. A row longer than the budget
    goes alone."""
    batches = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= token_budget:
            batches[-1].append(i)  # fits: the batch's first row is its longest
        else:
            batches.append([i])
    return batches


def _chunk_logprobs(head, hidden, targets, temperature):
    """fp32 log-softmax of one chunk of positions, returning only the target tokens' log-probs
    (N,) and the entropies (N,). Called under checkpoint, so the (N, V) logits are not kept."""
    logp = torch.log_softmax(head(hidden) / temperature, -1)
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, targets[:, None])[:, 0], entropy


def output_head(model):
    """hidden (N, H) -> fp32 logits (N, V) as the model's own forward computes them: the LM head, then the
    post-processing some architectures apply after it, read from the config: Cohere's logit_scale (times),
    Granite's and MiniCPM3's logits_scaling (divided by), Gemma-2/3's final_logit_softcapping (cap * tanh(z / cap)).
    Post-processing of other names is not known here: check_logits refuses such a model."""
    cfg, head = model.config.get_text_config(), model.get_output_embeddings()
    scale = (getattr(cfg, "logit_scale", None) or 1.0) / (getattr(cfg, "logits_scaling", None) or 1.0)
    if cap := getattr(cfg, "final_logit_softcapping", None):
        return lambda h: cap * torch.tanh(head(h).float() * scale / cap)
    return lambda h: head(h).float() * scale


def completion_logprobs(model, prompts, completions, temperature=1.0, chunk_tokens=4096):
    """Log-prob and entropy of every completion token given its prompt, under the model's current
    adapter: one right-padded forward pass over prompt + completion (B, L), then the LM head and an
    fp32 log-softmax only at the completion positions, chunk_tokens at a time (each chunk
    recomputed in backward rather than storing (tokens, vocab) fp32 logits). The head is output_head's:
    the model's own logit post-processing (Gemma-2 soft-capping, Granite / Cohere scaling) is applied, since
    the sampler draws from the forward's logits. Logits are divided by the sampling temperature, as the
    sampler does. Returns two lists of (len(completion),) tensors."""
    device = next(model.parameters()).device
    ids = torch.zeros((len(prompts), max(len(p) + len(c) for p, c in zip(prompts, completions))), dtype=torch.long)
    rows, cols, targets = [], [], []
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)  # (B, L): prompt + completion, right-padded with 0
        rows += [i] * len(c)
        cols += range(len(p) - 1, len(p) + len(c) - 1)  # position t predicts token t + 1
        targets += c
    # No attention mask: with right padding, causal attention already keeps every real token from
    # seeing the pads after it, and without an explicit mask SDPA runs its fused causal kernels
    # instead of materialising (rows, heads, L, L) attention weights for backward.
    hidden = model.base_model(input_ids=ids.to(device), use_cache=False).last_hidden_state  # no cache kept
    hidden = hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]  # (N, H)
    targets, head = torch.tensor(targets, device=device), output_head(model)
    # with grad on, each chunk runs under checkpoint: its (N, V) logits are recomputed in backward, not kept
    run = partial(checkpoint, _chunk_logprobs, use_reentrant=False) if torch.is_grad_enabled() else _chunk_logprobs
    logps, entropies = zip(*[run(head, hidden[s:s + chunk_tokens], targets[s:s + chunk_tokens], temperature)
                             for s in range(0, len(targets), chunk_tokens)])
    return tuple(list(torch.cat(xs).split([len(c) for c in completions])) for xs in (logps, entropies))


def check_logits(model, tokens=32):
    """ValueError unless completion_logprobs gives the log-probs of the model's own forward logits (what
    the sampler draws from) on a short sequence: it refuses a model whose logit post-processing
    output_head lacks (e.g. Falcon-H1's lm_head_multiplier) rather than train it on wrong ratios."""
    ids = torch.arange(1, tokens + 1, device=next(model.parameters()).device) % model.config.get_text_config().vocab_size
    with torch.no_grad():
        ours = completion_logprobs(model, [ids[:1].tolist()], [ids[1:].tolist()])[0][0]
        theirs = model(input_ids=ids[None]).logits[0, :-1].float().log_softmax(-1).gather(-1, ids[1:, None])[:, 0]
    # mean, not max: bf16 rounding (one ulp of a logit near 20 is 0.125; Gemma-2's forward soft-caps in
    # bf16, ours in fp32) moves single log-probs by up to ~0.1 (mean 0.03 on a bf16 Gemma-2 with logits
    # near 30, measured on CPU); a missing scale or soft-cap moves those of a real model by nats
    if (gap := float((ours - theirs).abs().mean())) > 0.5:
        raise ValueError(f"{type(model).__name__}: its forward post-processes the logits in a way grpo.output_head "
                         f"does not know (log-probs differ by {gap:.3g} on average); not supported")


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
    unclipped, clipped_obj = -advantages * ratio, -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss, clipped = torch.maximum(unclipped, clipped_obj), clipped_obj > unclipped
    if dual_clip:
        cap = -advantages * dual_clip
        capped = (advantages < 0) & (loss > cap)
        loss, clipped = torch.where(capped, cap, loss), clipped | capped
    kl = torch.zeros_like(loss)
    if ref_logprobs is not None:
        d = (ref_logprobs - logprobs).clamp(-20, 20)
        kl = (d.exp() - d - 1).clamp(max=10)  # k3: unbiased, always >= 0 (verl's low_var_kl)
        loss = loss + kl_coef * kl
    return loss, clipped, kl
