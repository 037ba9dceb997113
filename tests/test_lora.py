"""Tests for lora.py on a tiny random Qwen3 (fp32, CPU, seconds), including the PEFT export / import and
train.py --init-adapters. The PEFT round trip runs where peft is installed (CI installs it) and is skipped
elsewhere. Run: python -m pytest -q tests/test_lora.py"""
import copy
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lora
from lora import (LoRALinear, active_adapter, adapter_names, adapter_parameters, adapter_state_dict, add_adapter,
                  delete_adapter, export_peft, load_adapter, save_adapter, set_adapter)

LINEARS = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=8, max_position_embeddings=256)
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**{**cfg, **overrides})).float().eval()


def randomize(model, name, seed):
    """Non-zero A and B, so the adapter actually changes the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in adapter_parameters(model, name):
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


@pytest.fixture
def ids():
    return torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_fresh_adapter_is_exactly_base(ids):
    model = tiny_model()
    base = logits(model, ids)
    assert add_adapter(model, "a", rank=4, alpha=8) == 2 * len(LINEARS)
    assert active_adapter(model) is None            # adding does not activate
    set_adapter(model, "a")
    assert torch.equal(logits(model, ids), base)     # B = 0: same bits, not just close
    assert isinstance(model.lm_head, nn.Linear) and not isinstance(model.lm_head, LoRALinear)
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    A = model.model.layers[0].self_attn.q_proj.lora_A["a"]
    assert A.dtype == torch.float32 and A.abs().max() <= 1 / 32 ** 0.5 and A.abs().sum() > 0


def test_lora_layer_is_base_plus_alpha_over_r_BAx_by_hand():
    """One LoRALinear against y = W x + b + (alpha / r) B A x with the scale written out as a number
    (the model-level reference below takes it from LoRALinear.scaling, so it cannot see a wrong scale).
    Kills: alpha / sqrt(r) (rsLoRA's scale) instead of alpha / r; the merged weight off the same way."""
    g = torch.Generator().manual_seed(0)
    base = nn.Linear(6, 5)
    with torch.no_grad():
        base.weight.copy_(torch.randn(5, 6, generator=g))
        base.bias.copy_(torch.randn(5, generator=g))
    layer = LoRALinear(base)
    layer.add("a", rank=4, alpha=8.0, dropout=0.0)   # alpha / r = 2; alpha / sqrt(r) would be 4
    layer.add("b", rank=2, alpha=3.0, dropout=0.0)   # alpha / r = 1.5
    A, B = torch.randn(4, 6, generator=g), torch.randn(5, 4, generator=g)
    with torch.no_grad():
        layer.lora_A["a"].copy_(A)
        layer.lora_B["a"].copy_(B)
        layer.lora_B["b"].copy_(torch.randn(5, 2, generator=g))
    x = torch.randn(3, 6, generator=g)
    plain = x @ base.weight.detach().T + base.bias.detach()
    with torch.no_grad():
        assert torch.equal(layer(x), plain)          # no adapter active: the base layer, bit for bit
        layer.active = "a"
        torch.testing.assert_close(layer(x), plain + 2.0 * (x @ A.T @ B.T), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(layer.merged_weight("a"), base.weight + 2.0 * B @ A, atol=1e-5, rtol=1e-5)
        layer.active = "b"
        Ab, Bb = layer.lora_A["b"], layer.lora_B["b"]
        torch.testing.assert_close(layer(x), plain + 1.5 * (x @ Ab.T @ Bb.T), atol=1e-5, rtol=1e-5)


def test_switching_adapters_matches_manual_reference(ids):
    model = tiny_model()
    reference = copy.deepcopy(model)                 # plain HF model, never wrapped
    base = logits(model, ids)
    add_adapter(model, "a", rank=4, alpha=8)
    add_adapter(model, "b", rank=2, alpha=16)
    randomize(model, "a", 1)
    randomize(model, "b", 2)
    outs = {}
    for name in ["a", "b"]:
        set_adapter(model, name)
        outs[name] = logits(model, ids)
        # Reference: hooks on the unwrapped copy add (alpha/r) * x A^T B^T to each linear's output.
        hooks = []
        for path, m in model.named_modules():
            if isinstance(m, LoRALinear):
                A, B, s = m.lora_A[name].detach(), m.lora_B[name].detach(), m.scaling(name)
                hooks.append(reference.get_submodule(path).register_forward_hook(
                    lambda mod, inp, out, A=A, B=B, s=s: out + s * (inp[0] @ A.T @ B.T)))
        expected = logits(reference, ids)
        for h in hooks:
            h.remove()
        torch.testing.assert_close(outs[name], expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(outs["a"], base) and not torch.allclose(outs["b"], base)
    assert not torch.allclose(outs["a"], outs["b"])
    set_adapter(model, None)
    assert torch.equal(logits(model, ids), base)
    set_adapter(model, "b")
    assert torch.equal(logits(model, ids), outs["b"]) and active_adapter(model) == "b"
    set_adapter(model, None)
    assert active_adapter(model) is None
    with pytest.raises(ValueError, match=r"unknown adapter 'c'.*\['a', 'b'\]"):
        set_adapter(model, "c")


def test_gradients_reach_only_the_active_adapter(ids):
    model = tiny_model()
    add_adapter(model, "a", rank=4)
    add_adapter(model, "b", rank=4)
    randomize(model, "a", 1)
    randomize(model, "b", 2)
    model.train()
    set_adapter(model, "a")
    model(ids).logits.float().pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in adapter_parameters(model, "a"))
    assert all(p.grad is None and not p.requires_grad for p in adapter_parameters(model, "b"))
    assert all(p.grad is None and not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    set_adapter(model, "b")
    assert all(p.requires_grad for p in adapter_parameters(model, "b"))
    assert not any(p.requires_grad for p in adapter_parameters(model, "a"))
    assert [n for n, p in model.named_parameters() if p.requires_grad] == \
        [n for n, _ in model.named_parameters() if n.endswith(".b") and "lora_" in n]


def test_targets_restrict_wrapping(ids):
    model = tiny_model()
    base = logits(model, ids)
    assert add_adapter(model, "qv", rank=4, targets=["q_proj", "v_proj"]) == 4
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    assert isinstance(attn.q_proj, LoRALinear) and isinstance(attn.v_proj, LoRALinear)
    assert type(attn.k_proj) is nn.Linear and type(mlp.up_proj) is nn.Linear
    with pytest.raises(ValueError, match="unknown LoRA target.*qproj.*q_proj"):
        add_adapter(model, "bad", targets=["qproj"])
    assert adapter_names(model) == ["qv"]
    # A second adapter on all layers wraps the rest; "qv" stays on q/v only.
    assert add_adapter(model, "all", rank=4) == 14
    assert len(adapter_parameters(model, "qv")) == 2 * 4 and len(adapter_parameters(model, "all")) == 2 * 14
    randomize(model, "qv", 3)
    set_adapter(model, "qv")                         # layers without "qv" return their base output
    assert not torch.allclose(logits(model, ids), base)
    set_adapter(model, "all")                        # "all" still has B = 0
    assert torch.equal(logits(model, ids), base)


def test_save_load_round_trip_is_exact(ids, tmp_path):
    model = tiny_model()
    add_adapter(model, "generator", rank=4, alpha=8, targets=["q_proj", "o_proj", "down_proj"])
    randomize(model, "generator", 4)
    path = str(tmp_path / "ckpt" / "generator.safetensors")
    save_adapter(model, "generator", path, metadata={"step": 3, "role": "generator"})
    assert os.listdir(tmp_path / "ckpt") == ["generator.safetensors"]   # no tmp file left behind
    set_adapter(model, "generator")
    expected = logits(model, ids)
    sd = adapter_state_dict(model, "generator")
    assert "model.layers.0.self_attn.q_proj.lora_A" in sd and len(sd) == 2 * 6

    meta = load_adapter(model, "evaluator", path)    # into another name in the same model
    assert meta["step"] == "3" and meta["rank"] == 4 and meta["targets"] == ["down_proj", "o_proj", "q_proj"]
    assert all(torch.equal(v, adapter_state_dict(model, "evaluator")[k]) for k, v in sd.items())
    set_adapter(model, "evaluator")
    assert torch.equal(logits(model, ids), expected)

    fresh = tiny_model()                             # into a fresh model (same base weights)
    load_adapter(fresh, "generator", path)
    assert adapter_state_dict(fresh, "generator").keys() == sd.keys()
    set_adapter(fresh, "generator")
    assert torch.equal(logits(fresh, ids), expected)

    randomize(model, "evaluator", 5)                 # into an existing adapter overwrites it
    load_adapter(model, "evaluator", path)
    assert all(torch.equal(v, adapter_state_dict(model, "evaluator")[k]) for k, v in sd.items())


def test_load_into_mismatched_model_is_a_clear_error(tmp_path):
    model = tiny_model()
    add_adapter(model, "a", rank=4)
    path = str(tmp_path / "a.safetensors")
    save_adapter(model, "a", path)
    wider = tiny_model(hidden_size=48)
    with pytest.raises(ValueError, match=r"a\.safetensors does not fit.*shape"):
        load_adapter(wider, "a", path)
    assert adapter_names(wider) == []                # no half-made adapter left behind
    deeper = tiny_model(num_hidden_layers=3)
    with pytest.raises(ValueError, match=r"a\.safetensors does not fit.*missing keys"):
        load_adapter(deeper, "a", path)
    add_adapter(model, "r8", rank=8)
    with pytest.raises(ValueError, match=r"a\.safetensors does not fit this model \(adapter 'r8'\).*here has rank 8"):
        load_adapter(model, "r8", path)
    add_adapter(model, "qv", rank=4, targets=["q_proj", "v_proj"])
    with pytest.raises(ValueError, match=r"targets down_proj,gate.*here has rank 4, alpha 32.0, targets q_proj,v_proj$"):
        load_adapter(model, "qv", path)
    with pytest.raises(ValueError, match="reserved"):
        save_adapter(model, "a", path, metadata={"rank": 1})


def test_eval_and_set_adapter_never_merge(ids):
    model = tiny_model()
    add_adapter(model, "a", rank=4)
    randomize(model, "a", 7)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    set_adapter(model, "a")
    model.train()
    model.eval()
    set_adapter(model, None)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_dropout_only_in_train_mode(ids):
    model = tiny_model()
    add_adapter(model, "d", rank=4, dropout=0.5)
    randomize(model, "d", 8)
    set_adapter(model, "d")
    model.eval()
    assert torch.equal(logits(model, ids), logits(model, ids))
    model.train()
    torch.manual_seed(0)
    assert not torch.allclose(logits(model, ids), logits(model, ids))
    set_adapter(model, None)                         # no adapter: no dropout either
    assert torch.equal(logits(model, ids), logits(model, ids))


def test_adapter_added_to_an_eval_model_does_not_drop_out(ids):
    """Regression: LoRALinear wrappers and their Dropout were created in train mode inside an eval model, so an
    adapter with dropout added (or loaded: load_adapter creates it with the file's dropout) after model.eval()
    dropped out in every forward until the next .eval() or .train(): eval logits were noisy (a PEFT adapter with
    lora_dropout 0.1 did not match PEFT), and train.py's first old log-probs, meant without dropout, had it."""
    model = tiny_model()                             # in eval mode
    add_adapter(model, "d", rank=4, dropout=0.5)
    randomize(model, "d", 8)
    set_adapter(model, "d")
    assert not any(m.training for m in model.modules())
    assert torch.equal(logits(model, ids), logits(model, ids))
    model.train()
    add_adapter(model, "e", rank=4, dropout=0.5)     # and in a training model they train
    assert all(m.training for m in model.modules())


def test_bf16_model_keeps_fp32_master_weights(ids):
    model = tiny_model().to(torch.bfloat16)
    add_adapter(model, "a", rank=4)
    randomize(model, "a", 9)
    set_adapter(model, "a")
    out = model(ids).logits
    assert out.dtype == torch.bfloat16
    out.float().pow(2).mean().backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in adapter_parameters(model, "a"))


def test_seeded_init_and_delete():
    m1, m2 = tiny_model(), tiny_model()
    add_adapter(m1, "a", rank=4, generator=torch.Generator().manual_seed(0))
    add_adapter(m2, "a", rank=4, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(v, adapter_state_dict(m2, "a")[k]) for k, v in adapter_state_dict(m1, "a").items())
    with pytest.raises(ValueError, match="already exists"):
        add_adapter(m1, "a")
    set_adapter(m1, "a")
    delete_adapter(m1, "a")
    assert adapter_names(m1) == [] and active_adapter(m1) is None


def test_merged_context_matches_unmerged_and_restores():
    """Inside `merged`, the forward equals the adapter's unmerged forward up to rounding; afterwards
    the base weights are the very same tensors and the adapter is active again."""
    import lora
    model = tiny_model()
    add_adapter(model, "a", rank=4, alpha=8, generator=torch.Generator().manual_seed(0))
    set_adapter(model, "a")
    with torch.no_grad():
        for p in adapter_parameters(model, "a"):
            p.normal_(0, 0.05)  # B is zero at init: give the adapter a real effect
    x = torch.tensor([[5, 17, 42, 99, 3]])
    before = [(p.data_ptr(), p.detach().clone()) for p in model.parameters()]
    ref = model(input_ids=x).logits
    lora.set_adapter(model, None)
    base = model(input_ids=x).logits
    lora.set_adapter(model, "a")
    with lora.merged(model):
        assert lora.active_adapter(model) is None
        inside = model(input_ids=x).logits
    torch.testing.assert_close(inside, ref, atol=1e-4, rtol=1e-4)
    assert (inside - base).abs().max() > 1e-2  # the adapter did change the output
    assert lora.active_adapter(model) == "a"
    assert all(ptr == p.data_ptr() and torch.equal(v, p) for (ptr, v), p in zip(before, model.parameters()))
    torch.testing.assert_close(model(input_ids=x).logits, ref, atol=0, rtol=0)


# ----------------------------------------------------------------------------- PEFT interop

def peft_tensors(folder):
    """A PEFT folder's tensors keyed as ours: PEFT's key is "base_model.model." + our key + ".weight"."""
    return {k.removeprefix("base_model.model.").removesuffix(".weight"): v
            for k, v in load_file(os.path.join(folder, "adapter_model.safetensors")).items()}


def test_peft_export_layout_config_and_our_round_trip(ids, tmp_path):
    """export_peft on a run folder exports its last checkpoint in PEFT's layout, written out by hand here (key
    prefix and suffix, r / lora_alpha, no rsLoRA), so a wrong name or scale convention fails; our load_adapter reads
    the folder back with the same logits, bit for bit; a checkpoint folder or one file exports the same; the CLI
    prints the folders or one error line."""
    model = tiny_model()
    add_adapter(model, "generator", rank=4, alpha=8, targets=["q_proj", "down_proj"])
    add_adapter(model, "evaluator", rank=2, alpha=3)
    run = tmp_path / "run"
    randomize(model, "generator", 1)
    save_adapter(model, "generator", str(run / "step_000001" / "generator.safetensors"))   # older: not exported
    randomize(model, "generator", 2)
    randomize(model, "evaluator", 3)
    for name in ("generator", "evaluator"):
        save_adapter(model, name, str(run / "step_000002" / f"{name}.safetensors"), {"model": "Qwen/Qwen3-0.6B"})
    (run / "step_000003.tmp").mkdir()                # a checkpoint being written: ignored
    out = tmp_path / "peft"
    assert export_peft(str(run), str(out)) == [str(out / "evaluator"), str(out / "generator")]
    assert sorted(os.listdir(out / "generator")) == ["adapter_config.json", "adapter_model.safetensors"]
    tensors = load_file(out / "generator" / "adapter_model.safetensors")
    assert set(tensors) == {f"base_model.model.model.layers.{i}.{m}.lora_{ab}.weight"
                            for i in (0, 1) for m in ("self_attn.q_proj", "mlp.down_proj") for ab in "AB"}
    assert torch.equal(tensors["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"],
                       model.model.layers[1].mlp.down_proj.lora_B["generator"].detach())   # step 2's, not step 1's
    cfg = json.load(open(out / "generator" / "adapter_config.json"))
    assert {k: cfg[k] for k in ("peft_type", "task_type", "r", "lora_alpha", "use_rslora", "lora_dropout",
                                "target_modules", "base_model_name_or_path", "bias", "use_dora")} == {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "use_rslora": False,
        "lora_dropout": 0.0, "target_modules": ["down_proj", "q_proj"], "base_model_name_or_path": "Qwen/Qwen3-0.6B",
        "bias": "none", "use_dora": False}
    assert json.load(open(out / "evaluator" / "adapter_config.json"))["r"] == 2
    for name in ("generator", "evaluator"):
        fresh = tiny_model()
        assert load_adapter(fresh, name, str(out / name))["rank"] == (4 if name == "generator" else 2)
        set_adapter(fresh, name)
        set_adapter(model, name)
        assert torch.equal(logits(fresh, ids), logits(model, ids))
    for src in (run / "step_000002", run / "step_000002" / "evaluator.safetensors"):
        folder = export_peft(str(src), str(tmp_path / src.name))[0]   # the checkpoint's: evaluator, generator
        assert folder == str(tmp_path / src.name / "evaluator")
        assert all(torch.equal(v, load_file(out / "evaluator" / "adapter_model.safetensors")[k])
                   for k, v in load_file(os.path.join(folder, "adapter_model.safetensors")).items())
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cli = subprocess.run([sys.executable, "lora.py", "export", str(run), str(tmp_path / "cli")], cwd=root,
                         capture_output=True, text=True)
    assert cli.returncode == 0 and cli.stdout.split() == [str(tmp_path / "cli" / n) for n in ("evaluator", "generator")]
    bad = subprocess.run([sys.executable, "lora.py", "export", str(tmp_path / "nothing"), str(tmp_path / "x")],
                         cwd=root, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and len(bad.stderr.splitlines()) == 1  # as a bad flag
    usage = subprocess.run([sys.executable, "lora.py", "expor", str(run), "x"], cwd=root, capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("usage:") and len(usage.stderr.splitlines()) == 1


def test_peft_options_we_do_not_compute_are_refused(tmp_path):
    """rsLoRA scales by alpha / sqrt(r) and alpha_pattern per layer: our forward would silently use alpha / r."""
    model = tiny_model()
    add_adapter(model, "a", rank=4)
    save_adapter(model, "a", str(tmp_path / "a.safetensors"))
    (folder,) = export_peft(str(tmp_path / "a.safetensors"), str(tmp_path / "peft"))
    cfg = json.load(open(os.path.join(folder, "adapter_config.json")))
    for change in ({"use_rslora": True}, {"alpha_pattern": {"q_proj": 16}}, {"peft_type": "LOHA"}):
        json.dump({**cfg, **change}, open(os.path.join(folder, "adapter_config.json"), "w"))
        with pytest.raises(ValueError, match="not a plain PEFT LoRA adapter"):
            load_adapter(tiny_model(), "a", folder)
    # a config without r or not JSON: a ValueError naming the file (a KeyError traceback from train.py before)
    for text in (json.dumps({k: v for k, v in cfg.items() if k != "r"}), "{not json", "[1]"):
        open(os.path.join(folder, "adapter_config.json"), "w").write(text)
        with pytest.raises(ValueError, match="adapter_config.json: not a PEFT LoRA config"):
            load_adapter(tiny_model(), "a", folder)


def test_peft_loads_our_export_with_our_logits_and_we_load_peft_adapters(ids, tmp_path):
    """PEFT itself on the tiny model: PeftModel.from_pretrained of our export gives our logits (measured: equal
    to the last bit in fp32), and an adapter PEFT trained-and-saved loads into ours with PEFT's logits."""
    peft = pytest.importorskip("peft")
    model = tiny_model()
    add_adapter(model, "generator", rank=4, alpha=8, targets=["q_proj", "v_proj", "down_proj"])
    add_adapter(model, "evaluator", rank=2, alpha=3)   # scale 1.5, all seven layer kinds
    randomize(model, "generator", 1)
    randomize(model, "evaluator", 2)
    for name in ("generator", "evaluator"):
        save_adapter(model, name, str(tmp_path / "ckpt" / f"{name}.safetensors"))
    export_peft(str(tmp_path / "ckpt"), str(tmp_path / "peft"))
    base = logits(tiny_model(), ids)
    for name in ("generator", "evaluator"):
        set_adapter(model, name)
        ours = logits(model, ids)
        theirs = logits(peft.PeftModel.from_pretrained(tiny_model(), str(tmp_path / "peft" / name)).eval(), ids)
        torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
        assert (ours - base).abs().max() > 1e-2     # the adapter matters, so a dropped one would show

    config = peft.LoraConfig(r=4, lora_alpha=16, lora_dropout=0.1, target_modules=["q_proj", "o_proj"],
                             task_type="CAUSAL_LM")
    made = peft.get_peft_model(tiny_model(), config)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in made.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    made.save_pretrained(str(tmp_path / "made"))
    fresh = tiny_model()
    cfg = load_adapter(fresh, "g", str(tmp_path / "made"))
    assert (cfg["rank"], cfg["alpha"], cfg["dropout"], cfg["targets"]) == (4, 16.0, 0.1, ["o_proj", "q_proj"])
    set_adapter(fresh, "g")
    torch.testing.assert_close(logits(fresh, ids), logits(made.eval(), ids), atol=1e-5, rtol=1e-5)


def test_init_adapters_start_a_run_from_peft_folders(tiny, scratch_adapter, tmp_path, monkeypatch, capsys):
    """train.py --init-adapters: the run's adapters at its first step equal the exported ones, per adapter
    (DIR/<adapter>/; that run trains its step) or one folder for all (stopped at the first step, to save time);
    a missing folder or adapter, another rank or other targets: one line naming the problem."""
    import train
    import workflows
    model, _ = tiny
    scratch_adapter("generator", seed=1, rank=4, alpha=8)
    scratch_adapter("evaluator", seed=2, rank=4, alpha=8)
    for name in ("generator", "evaluator"):
        save_adapter(model, name, str(tmp_path / "ckpt" / f"{name}.safetensors"))
    peft_dir = tmp_path / "peft"
    export_peft(str(tmp_path / "ckpt"), str(peft_dir))
    first, real_step = {}, train.train_step

    def spy(model, *a):
        if a[-1] == 1:   # the step number: the adapters before any update
            first.update({n: adapter_state_dict(model, n) for n in adapter_names(model)})
        if first.get("stop"):
            raise StopIteration
        return real_step(model, *a)
    monkeypatch.setattr(train, "train_step", spy)
    monkeypatch.setattr(workflows.rewards, "grade", lambda texts, problems, **kw: [(0.0, "wrong")] * len(texts))
    args = ["--workflow", "evalopt", "--policy", "ip", "--steps", "1", "--lora-rank", "4", "--lora-alpha", "8",
            "--model", "tiny", "--problems", "2", "--group", "2", "--max-new-tokens", "4", "--device", "cpu"]
    train.main([*args, "--init-adapters", str(peft_dir), "--out", str(tmp_path / "run")])
    assert os.path.isdir(tmp_path / "run" / "step_000001")
    for init, source in ((peft_dir, {"generator": "generator", "evaluator": "evaluator"}),
                         (peft_dir / "generator", {"generator": "generator", "evaluator": "generator"})):
        if init != peft_dir:
            first.clear()
            first["stop"] = True
            with pytest.raises(StopIteration):
                train.main([*args, "--init-adapters", str(init), "--out", str(tmp_path / "one-for-all")])
        for name, src in source.items():
            exported = peft_tensors(peft_dir / src)
            assert first[name].keys() == exported.keys()
            assert all(torch.equal(first[name][k], v) for k, v in exported.items()), (name, src)
    (tmp_path / "partial" / "generator").mkdir(parents=True)
    for f in os.listdir(peft_dir / "generator"):
        os.link(peft_dir / "generator" / f, tmp_path / "partial" / "generator" / f)
    for extra, init, message in ((["--lora-rank", "8"], peft_dir, r"has rank 4, alpha 8.0.*here has rank 8"),
                                 (["--lora-targets", "q_proj"], peft_dir, r"targets down_proj,.*targets q_proj$"),
                                 ([], tmp_path / "partial", r"partial/evaluator"),
                                 ([], tmp_path / "missing", r"missing/generator")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:  # bad input: one line on stderr, exit code 2
            train.main([*args, *extra, "--init-adapters", str(init), "--out", str(tmp_path / "bad")])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and re.search(message, err)
