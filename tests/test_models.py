"""The tiny offline model and model loading: Qwen-style tokens and chat template, the real
save_pretrained / from_pretrained path, and one clear line for every bad model spec."""
import pytest

import models


def test_tiny_tokenizer_has_qwen_specials_and_thinking_off_template(tiny):
    model, tok = tiny
    for t in models.SPECIALS:
        ids = tok(t, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.decode(ids) == t  # each special is one token
    text = tok.decode(models.chat_ids(tok, "What is 2+3?"))
    # exactly how Qwen3 renders one user turn with enable_thinking=False
    assert text == ("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
                    "<think>\n\n</think>\n\n")
    stops = models.stop_ids(model, tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") in stops and tok.pad_token_id in stops
    assert tok.decode(tok("def f(x):\n    return x + 1", add_special_tokens=False)["input_ids"]) == \
        "def f(x):\n    return x + 1"  # byte-level: any text round-trips


def test_tiny_model_is_deterministic_and_small(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    models.build_tiny(tmp_path / "a")
    models.build_tiny(tmp_path / "b")
    a, b = (AutoModelForCausalLM.from_pretrained(tmp_path / x) for x in "ab")
    assert type(a).__name__ == "Qwen3ForCausalLM" and a.config.num_hidden_layers == 2
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("spec,message", [
    ("./no/such/folder", "no such model folder or file"),
    ("/tmp/missing-model.gguf", "no such GGUF file"),
    ("not a name!", "no such model folder or file"),
])
def test_bad_model_specs_are_clear_errors(spec, message):
    with pytest.raises(FileNotFoundError, match=message):
        models.load_model(spec, device="cpu")


def offline(monkeypatch):
    """Fake a machine without network: the hub probe answers False at once (and records the call);
    HF_HUB_OFFLINE keeps transformers' own cache lookup from asking the hub too. Regression: these
    tests spent ~23 s each on a real lookup."""
    asked = []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import (2.x): set its constant too, or a real lookup retries for ~23 s
    import huggingface_hub.constants
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(models, "_hub_reachable", lambda *a, **k: asked.append(1) or False)
    return asked


def test_hub_name_without_network_says_so(monkeypatch):
    asked = offline(monkeypatch)
    with pytest.raises(RuntimeError, match="cannot be reached.*--model tiny"):
        models.load_model("someone/not-cached-model-xyz", device="cpu")
    assert asked  # not in the cache, so the hub was asked


def test_default_model_falls_back_to_tiny_with_one_line(monkeypatch, capsys):
    offline(monkeypatch)
    monkeypatch.setattr(models, "DEFAULT_MODEL", "someone/not-cached-model-xyz")
    _, _, used = models.load_default_model(None, device="cpu")
    out = capsys.readouterr().out.strip().splitlines()
    assert used == "tiny" and len(out) == 1 and "built-in tiny model" in out[0]


def test_cache_lookup_of_a_hub_name_retries_nothing(monkeypatch):
    """With peft installed and HF_HUB_OFFLINE unset, looking a hub name up in the local cache does not wait on the
    hub. Regression: transformers 5.25 asked the hub for the model's PEFT adapter_config.json even with
    local_files_only, so the README's first command on a machine with no network and peft installed (as CI has it)
    retried for ~23 s (sleeps of 1, 2, 4, 8, 8 s) before falling back to tiny. (huggingface_hub 2.4 may still try one request for its user agent: no wait.)"""
    pytest.importorskip("peft")
    import huggingface_hub.constants
    import socket
    import time
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False, raising=False)

    def no_network(*a, **k):
        raise socket.gaierror("no network (test)")
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)  # the hub client's retries wait here
    monkeypatch.setattr(models, "_hub_reachable", lambda *a, **k: False)
    with pytest.raises(RuntimeError, match="cannot be reached"):
        models.load_model("someone/not-cached-model-xyz", device="cpu")
    assert slept == []


def test_hub_probe_honours_hf_hub_offline(monkeypatch):
    """With HF_HUB_OFFLINE set the probe says no without opening a connection."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models.socket, "create_connection", lambda *a, **k: pytest.fail("opened a connection"))
    assert models._hub_reachable() is False


def test_load_model_turns_cudnn_attention_off():
    """cuDNN's attention builds a plan for each shape new to the process (docs/benchmarks.md: ~0.1 s a forward +
    backward on the H200, where PyTorch tries it first); every script loads through load_model, which turns it off."""
    import torch
    was = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        models.load_model("tiny", device="cpu")
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
