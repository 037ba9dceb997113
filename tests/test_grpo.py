"""GRPO math against hand-computed values, and the properties other RL libraries got wrong:
micro-batching does not change the gradient, groups are explicit, only sampled tokens count."""
import contextlib
import math

import pytest
import torch

import grpo
import lora
from models import chat_ids, stop_ids
from sampler import sample


def test_group_advantages_by_hand():
    keys = [("p1", "g")] * 4 + [("p2", "g")] * 2 + [("p3", "g")]
    rewards = [1, 0, 0, 0, 1, 1, 1]
    adv, singletons = grpo.group_advantages(keys, rewards, eps=0.0)
    std = math.sqrt((0.75 ** 2 + 3 * 0.25 ** 2) / 3)  # unbiased, as torch.std / verl
    assert adv[:4] == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std])
    assert adv[4:6] == [0.0, 0.0]        # equal rewards: no signal
    assert adv[6] == 0.0 and singletons == 1  # a group of one never becomes a raw reward
    mean_only, _ = grpo.group_advantages(keys, rewards, scale=False)
    assert mean_only[:4] == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_token_loss_hand_computed():
    lp = torch.tensor([-1.0, -2.0, -0.5, -3.0])
    old = torch.tensor([-1.0, -2.5, -0.1, -1.0])
    adv = torch.tensor([1.0, 1.0, -2.0, -2.0])
    loss, clipped, kl = grpo.token_loss(lp, old, adv, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    r = [1.0, math.exp(0.5), math.exp(-0.4), math.exp(-2.0)]
    # token 0: ratio 1 -> -A r = -1. token 1: ratio 1.65 > 1.28, A>0: max(-1.65, -1.28) = -1.28 (clipped).
    # token 2: ratio 0.67 < 0.8, A<0: max(2*0.67, 2*0.8) = 1.6 (clipped). token 3: ratio 0.135, A<0:
    # max(0.27, 1.6) = 1.6 under the dual cap 6.
    expect = [-1.0, -1.28, 1.6, 1.6]
    assert loss.tolist() == pytest.approx(expect, abs=1e-6)
    assert clipped.tolist() == [False, True, True, True]
    assert r[1] > 1.28 and r[2] < 0.8 and kl.abs().sum() == 0
    # dual clip engages when A < 0 and the ratio is huge: the loss is capped at -A * 3
    big, cl, _ = grpo.token_loss(torch.tensor([0.0]), torch.tensor([-5.0]), torch.tensor([-1.0]))
    assert big.item() == pytest.approx(3.0) and cl.item()
    # weighted batch loss with seq-mean-token-mean: rows of 1 and 3 tokens weigh 1/2 each
    w, shares = grpo.token_weights(["a", "b"], [1, 3])
    flat = torch.tensor([w[0]] + [w[1]] * 3)
    assert (flat * loss).sum().item() == pytest.approx(0.5 * -1.0 + 0.5 * (-1.28 + 1.6 + 1.6) / 3)
    assert shares == pytest.approx({"a": 0.5, "b": 0.5})


def test_token_loss_branches_the_hand_computed_test_does_not_reach():
    """Kills: the clip flag set wherever the clipped and unclipped objectives differ (it must be set only
    where the clip wins), and the dual clip applied when it is off (dual_clip=0) or to A > 0. Each token
    also checks its gradient: -A * ratio where the objective is unclipped, 0 where a clip or cap holds."""
    def one(ratio, a, **kw):
        lp = torch.tensor([math.log(ratio)], requires_grad=True)
        loss, clipped, _ = grpo.token_loss(lp, torch.zeros(1), torch.tensor([a]), **kw)
        loss.backward()
        return loss.item(), bool(clipped.item()), lp.grad.item()
    # A > 0 and the ratio below 1 - clip_low: no clip for a positive advantage going down (max picks -A r)
    assert one(0.5, 1.0) == pytest.approx((-0.5, False, -0.5))
    assert one(0.5, 2.0) == pytest.approx((-1.0, False, -1.0))
    # A < 0 and the ratio between 1 + clip_high and the dual cap 3: unclipped, loss -A r = 2
    assert one(2.0, -1.0) == pytest.approx((2.0, False, 2.0))
    assert one(2.0, -1.0, dual_clip=3.0) == one(2.0, -1.0)
    # ... and past the cap: loss -A * 3, no gradient
    assert one(4.0, -1.0) == pytest.approx((3.0, True, 0.0))
    # dual clip off: the same token keeps its full loss -A r and its gradient
    assert one(4.0, -1.0, dual_clip=0) == pytest.approx((4.0, False, 4.0))
    assert one(20.0, -0.5, dual_clip=0) == pytest.approx((10.0, False, 10.0))
    # dual clip never touches A > 0, whatever the ratio (there the high clip holds: -A * 1.28)
    assert one(50.0, 1.0) == pytest.approx((-1.28, True, 0.0))
    assert one(1.1, 1.0, dual_clip=0.5) == pytest.approx((-1.1, False, -1.1))


def test_token_weights_within_a_role_for_every_mode():
    """Per-token weights by hand with unequal lengths inside a role (roles g, g, g, a; lengths 2, 6, 4, 8).
    Kills: role-balanced splitting a role's 1/R by tokens (token-mean inside the role) instead of by rows;
    the role shares alone cannot see that, both give each role 1/2."""
    roles, lengths = ["g", "g", "g", "a"], [2, 6, 4, 8]
    expect = {  # every row 1/4 of the total; every token 1/20; each role 1/2, then each row 1/3 of g's half
        "seq-mean-token-mean": [1 / 8, 1 / 24, 1 / 16, 1 / 32],
        "token-mean": [1 / 20] * 4,
        "role-balanced": [1 / 12, 1 / 36, 1 / 24, 1 / 16],
    }
    for mode, w in expect.items():
        weights, shares = grpo.token_weights(roles, lengths, mode)
        assert weights == pytest.approx(w), mode
        assert shares["g"] == pytest.approx(sum(x * n for x, n in zip(w[:3], lengths[:3]))), mode
    # role weights scale and renormalise: a 3x under seq-mean-token-mean -> rows 1/4, 1/4, 1/4, 3/4, over 3/2
    weights, shares = grpo.token_weights(roles, lengths, "seq-mean-token-mean", {"a": 3.0})
    assert weights == pytest.approx([1 / 12, 1 / 36, 1 / 24, 1 / 16])
    assert shares == pytest.approx({"g": 0.5, "a": 0.5})
    weights, _ = grpo.token_weights(roles, lengths, "token-mean", {"g": 0.0})
    assert weights == pytest.approx([0, 0, 0, 1 / 8])


def test_huge_log_ratio_gives_finite_gradient():
    """Regression: an unclamped exp(lp - old) overflowed to inf and 0 * inf put NaN in the gradient
    while the (clipped) loss stayed finite, so the step was skipped."""
    for a in (1.0, -1.0):
        lp = torch.tensor([100.0, 0.0], requires_grad=True)
        loss, _, _ = grpo.token_loss(lp, torch.zeros(2), torch.tensor([a, a]))
        loss.sum().backward()
        assert torch.isfinite(loss).all() and torch.isfinite(lp.grad).all()


def test_k3_kl_is_zero_at_equal_logprobs_and_positive_otherwise():
    lp = torch.tensor([-1.0, -2.0])
    _, _, kl = grpo.token_loss(lp, lp, torch.zeros(2), ref_logprobs=lp.clone(), kl_coef=torch.ones(2))
    assert kl.tolist() == [0.0, 0.0]
    loss, _, kl = grpo.token_loss(lp, lp, torch.zeros(2), ref_logprobs=torch.tensor([-1.5, -1.0]),
                                  kl_coef=torch.tensor([0.5, 0.0]))
    d = torch.tensor([-0.5, 1.0])
    assert kl.tolist() == pytest.approx((d.exp() - d - 1).tolist())
    assert loss.tolist() == pytest.approx([0.5 * kl[0].item(), 0.0])  # per-row coefficient


def test_role_shares_per_aggregation_mode():
    # one Voting episode: 3 voters (long answers) + 1 aggregator (short answer)
    roles, lengths = ["generator"] * 3 + ["aggregator"], [30, 30, 30, 10]
    _, s = grpo.token_weights(roles, lengths, "seq-mean-token-mean")
    assert s == pytest.approx({"generator": 0.75, "aggregator": 0.25})
    _, s = grpo.token_weights(roles, lengths, "token-mean")
    assert s == pytest.approx({"generator": 0.9, "aggregator": 0.1})
    _, s = grpo.token_weights(roles, lengths, "role-balanced")
    assert s == pytest.approx({"generator": 0.5, "aggregator": 0.5})
    _, s = grpo.token_weights(roles, lengths, "seq-mean-token-mean", {"aggregator": 3.0})
    assert s == pytest.approx({"generator": 0.5, "aggregator": 0.5})
    w, s = grpo.token_weights(roles, [5, 0, 5, 5])  # an empty row weighs nothing
    assert w[1] == 0 and sum(s.values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        grpo.token_weights(roles, lengths, "sum")


def test_micro_batches_respect_budget():
    lengths = [5, 50, 7, 20, 20, 3]
    batches = grpo.micro_batches(lengths, 40)
    assert sorted(i for b in batches for i in b) == list(range(6))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 40


def _rollout(model, tok):
    prompts = [chat_ids(tok, t) for t in ["Add 2 and 3.", "hi", "def f(x):", "Count to five, please"]]
    outs = sample(model, prompts, n=2, max_new_tokens=12, temperature=1.0, stop_ids=[63, 125],
                  pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(3))
    return [prompts[c.prompt_index] for c in outs], outs


def test_recomputed_logprobs_match_sampler(tiny):
    model, tok = tiny
    prompts, outs = _rollout(model, tok)
    with torch.no_grad():
        lps, ents = grpo.completion_logprobs(model, prompts, [c.tokens for c in outs], temperature=1.0)
    for lp, ent, c in zip(lps, ents, outs):
        torch.testing.assert_close(lp, torch.tensor(c.logprobs), atol=1e-4, rtol=0)
        assert (ent >= 0).all() and ent.shape == lp.shape


def test_logprobs_at_temperature_match_sampler_and_hand_log_softmax(tiny):
    """Kills: completion_logprobs ignoring the sampling temperature (at T = 1, where the other tests
    compare, that bug is invisible). At T = 0.7 the training log-probs must equal the sampler's and a
    hand log_softmax(logits / T) of one full forward pass per row."""
    model, tok = tiny
    T = 0.7
    prompts = [chat_ids(tok, t) for t in ["Add 2 and 3.", "Count to five, please"]]
    outs = sample(model, prompts, n=2, max_new_tokens=10, temperature=T, pad_id=tok.pad_token_id,
                  generator=torch.Generator().manual_seed(5))
    rows = [prompts[c.prompt_index] for c in outs]
    with torch.no_grad():
        lps, _ = grpo.completion_logprobs(model, rows, [c.tokens for c in outs], temperature=T)
        for lp, c, p in zip(lps, outs, rows):
            logits = model(input_ids=torch.tensor([p + c.tokens])).logits[0, len(p) - 1:-1].float()
            by_hand = torch.log_softmax(logits / T, -1).gather(-1, torch.tensor(c.tokens)[:, None])[:, 0]
            at_one = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.tokens)[:, None])[:, 0]
            assert (by_hand - at_one).abs().max() > 1e-2  # T matters for these tokens
            torch.testing.assert_close(lp, by_hand, atol=1e-4, rtol=0)
            torch.testing.assert_close(lp, torch.tensor(c.logprobs), atol=1e-4, rtol=0)


@pytest.mark.parametrize("mode", grpo.AGGREGATIONS)
def test_micro_batching_does_not_change_the_gradient(tiny, scratch_adapter, mode):
    model, tok = tiny
    prompts, outs = _rollout(model, tok)
    comps = [c.tokens for c in outs]
    roles = ["generator", "evaluator"] * 4
    adv = [1.0, -0.5, 0.3, -1.2, 0.0, 2.0, -0.7, 0.4]
    scratch_adapter("mb")  # non-zero B so the adapter matters
    lora.set_adapter(model, "mb")
    with torch.no_grad():
        old = grpo.completion_logprobs(model, prompts, comps)[0]
    weights, _ = grpo.token_weights(roles, [len(c) for c in comps], mode)

    def grad(batches):
        params = lora.adapter_parameters(model, "mb")
        for p in params:
            p.grad = None
        for b in batches:
            lps, _ = grpo.completion_logprobs(model, [prompts[i] for i in b], [comps[i] for i in b])
            n = torch.tensor([len(comps[i]) for i in b])
            rep = lambda v: torch.repeat_interleave(torch.tensor([v[i] for i in b]), n)
            # perturb the old log-probs so ratios differ from 1 and clipping takes part
            loss_t, _, _ = grpo.token_loss(torch.cat(lps), torch.cat([old[i] - 0.3 * (i % 3 - 1) for i in b]),
                                           rep(adv))
            (rep(weights) * loss_t).sum().backward()
        return torch.cat([p.grad.flatten() for p in params])

    full = grad([list(range(8))])
    split = grad(grpo.micro_batches([len(c) for c in comps], token_budget=20))
    assert full.abs().sum() > 0
    torch.testing.assert_close(split, full, atol=1e-6, rtol=1e-4)


def test_zero_advantages_give_zero_gradient(tiny, scratch_adapter):
    model, tok = tiny
    prompts, outs = _rollout(model, tok)
    comps = [c.tokens for c in outs]
    scratch_adapter("z", std=0)  # as a fresh adapter: B = 0
    lora.set_adapter(model, "z")
    lps, _ = grpo.completion_logprobs(model, prompts, comps)
    lp = torch.cat(lps)
    assert lp.numel() == sum(len(c) for c in comps)  # one log-prob per sampled token, no prompt/pad
    loss, _, _ = grpo.token_loss(lp, lp.detach() - 0.1, torch.zeros_like(lp))  # ratio != 1 on purpose
    loss.sum().backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in lora.adapter_parameters(model, "z"))


def test_logprobs_ignore_padding_and_other_rows(tiny):
    """A row's log-probs are the same alone and right-padded next to a much longer row: padding and
    other rows never leak into a row's tokens (the loss mask covers only its own sampled tokens)."""
    model, tok = tiny
    prompts, outs = _rollout(model, tok)
    with torch.no_grad():
        alone = grpo.completion_logprobs(model, prompts[:1], [outs[0].tokens])[0][0]
        long_row = prompts[1] + list(range(5, 60))
        batched = grpo.completion_logprobs(model, [prompts[0], long_row], [outs[0].tokens, [7, 8, 9]])[0][0]
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- issue 14: logit post-processing

def _tiny_arch(name, **kw):
    import transformers
    config = getattr(transformers, name)(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                         initializer_range=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2, **kw)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("name,kw", [("Gemma2Config", {"final_logit_softcapping": 2.0}),
                                     ("GraniteConfig", {"logits_scaling": 4.0}),
                                     ("CohereConfig", {"logit_scale": 3.0})])
def test_logprobs_apply_the_models_logit_post_processing(name, kw):
    """Regression: completion_logprobs took the LM head alone, skipping Gemma-2's soft-cap and Granite's /
    Cohere's scaling that the model's forward (and so the sampler) applies. Checked against the forward."""
    model = _tiny_arch(name, **kw)
    prompt, completion = [5, 9, 17, 3], [40, 41, 7, 12, 60]
    with torch.no_grad():
        ours = grpo.completion_logprobs(model, [prompt], [completion], temperature=0.7)[0][0]
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1]
        theirs = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        hidden = model.base_model(input_ids=torch.tensor([prompt + completion])).last_hidden_state
        head_only = torch.log_softmax(model.get_output_embeddings()(hidden[0, len(prompt) - 1:-1]) / 0.7, -1)
        head_only = head_only.gather(-1, torch.tensor(completion)[:, None])[:, 0]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    assert (head_only - theirs).abs().max() > 0.1  # the post-processing matters here
    grpo.check_logits(model)


def test_check_logits_refuses_unknown_post_processing(tiny):
    """A forward that post-processes its logits in a way output_head does not apply is refused: here a Qwen3
    config given a soft-cap that Qwen3's forward ignores (so output_head's cap is the unknown difference)."""
    grpo.check_logits(tiny[0])
    model = _tiny_arch("Qwen3Config")
    grpo.check_logits(model)
    model.config.final_logit_softcapping = 2.0
    with pytest.raises(ValueError, match="post-processes the logits"):
        grpo.check_logits(model)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_update_logprobs_and_gradient_do_not_depend_on_the_attention_backend():
    """load_model turns cuDNN attention off (flash / memory-efficient run instead): the same math, so the update's
    log-probs and LoRA gradient agree with cuDNN's in bf16 up to rounding."""
    from models import load_model
    model, tok = load_model("tiny", device="cuda")
    prompts = [chat_ids(tok, t) for t in ["Add 2 and 3.", "Count to five, please", "def f(x):"]]
    comps = [list(range(40, 40 + n)) for n in (30, 7, 55)]
    lora.add_adapter(model, "b", rank=4, alpha=8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for p in lora.adapter_parameters(model, "b"):
            p.normal_(0, 0.05)
    lora.set_adapter(model, "b")

    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(cudnn):  # cuDNN's run allows only cuDNN: a shape it declines raises instead of comparing flash to flash
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        params = lora.adapter_parameters(model, "b")
        for p in params:
            p.grad = None
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION) if cudnn else contextlib.nullcontext():
            lp = torch.cat(grpo.completion_logprobs(model, prompts, comps)[0])
            lp.sum().backward()
        return lp.detach().float(), torch.cat([p.grad.flatten().float() for p in params])

    try:
        (lp_on, g_on), (lp_off, g_off) = run(True), run(False)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(False)
    torch.testing.assert_close(lp_off, lp_on, atol=0.05, rtol=0)
    assert torch.nn.functional.cosine_similarity(g_on, g_off, dim=0) > 0.999
