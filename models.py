"""Model loading for every script, and the tiny offline model used by tests and the smoke run.

`load_model(spec)` takes
  - "tiny": a random 2-layer Qwen3-architecture model with a small byte-level BPE tokenizer, both
    built in code (no download) and passed through the real save_pretrained / from_pretrained path;
  - a path to a `.gguf` file (needs the optional `gguf` package; transformers dequantizes it);
  - a local folder or a Hugging Face hub name (`AutoModelForCausalLM`).
It returns (model, tokenizer) in eval mode with frozen weights: bf16 on CUDA, fp32 on CPU. The tokenizer must have
a chat template (every prompt is a chat message); one without is refused, as is a weights file cut off.

`chat_ids(tokenizer, text)` renders one user message with the model's chat template and Qwen3's
thinking disabled (an empty think block prefilled, as the reference does), and `stop_ids` lists
the token ids that end a turn. Left out: quantized training, multi-GPU sharding, system prompts.
"""
import contextlib
import os
import re
import socket
import tempfile

import torch
import transformers
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer

transformers.utils.logging.disable_progress_bar()  # per-shard bars drown the training bar

TINY = "tiny"
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # the reference's smallest scale
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Qwen3's chat template, reduced to what we use: user/assistant/system turns and the generation
# prompt. With enable_thinking=False the assistant turn opens with an empty think block, exactly as
# Qwen3 renders it; later turns of a conversation are plain text (our workflows are single-turn).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}{%- endif -%}"
)

# Text the tiny tokenizer's merges are learned from: words our prompts and answers use, so that
# prompts are tens of tokens rather than hundreds of bytes.
_CORPUS = """Solve the following math problem step by step. Put the final answer in \\boxed{}.
Write a Python function that solves the task. Put the code in one ```python block.
You are reviewing a solution. End with \\boxed{Correct} or \\boxed{Incorrect} and the main issue.
Solution 1 Solution 2 Solution 3. Pick the best solution with \\boxed{N}. STRATEGY 1: STRATEGY 2:
Propose different strategies. Use the strategy to solve the problem. Compare the solutions.
def return for in range if else elif while import print assert len sum max min list dict str int
The store sells apples and oranges. Each box has 12 eggs. She buys 3 more and gives away 5.
How many does he have left? What is the total cost in dollars? per hour, every day, each week.
0 1 2 3 4 5 6 7 8 9 10 11 12 15 20 24 25 30 48 50 60 100 1000 + - * / = ( ) [ ] { } , . : ;
"""


def build_tiny(path, seed=0):
    """Write the tiny model and tokenizer to `path` with save_pretrained: a byte-level BPE tokenizer whose merges
    are learned from _CORPUS, and a 2-layer Qwen3 with random weights. Deterministic for `seed`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator([_CORPUS] * 4, trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                               chat_template=CHAT_TEMPLATE)
    config = transformers.Qwen3Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True, initializer_range=0.2,
        bos_token_id=None, pad_token_id=tok.pad_token_id, eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        transformers.Qwen3ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)


def _hub_reachable(timeout=3.0):
    with contextlib.suppress(OSError):  # no network, DNS or a firewall: unreachable
        if os.environ.get("HF_HUB_OFFLINE", "0") in ("0", "", "false"):  # HF_HUB_OFFLINE=1: not even tried
            socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
            return True
    return False


def _from_pretrained(spec, dtype, **kw):
    """(model, tokenizer) from one folder, hub name or GGUF file; kw go to both loaders, and local_files_only also to
    the model's lookup of a PEFT adapter, which transformers 5.25 (with peft installed) otherwise sends to the hub: ~23 s
    of retries and ten lines of warnings before the fallback to the tiny model on a machine with no network."""
    offline = {"local_files_only": kw.get("local_files_only", False)}
    try:  # a weights file cut off: one line naming the model
        model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, adapter_kwargs=offline, **kw)
    except SafetensorError as e:
        raise ValueError(f"model {spec}: a weights file is unreadable ({e})") from None
    # every prompt is a chat message (chat_ids); a folder without tokenizer files gets a stock tokenizer without one
    if (tok := AutoTokenizer.from_pretrained(spec, **kw)).chat_template is None:
        raise ValueError(f"model {spec}: its tokenizer has no chat template (no tokenizer files? a base model?)")
    return model, tok


def _load_pretrained(spec, dtype):
    """Local cache first (fast, offline), then the hub if it answers; a clear error otherwise."""
    with contextlib.suppress(OSError):  # not cached (or incomplete): try the hub
        return _from_pretrained(spec, dtype, local_files_only=True)
    if not _hub_reachable():
        raise RuntimeError(f"model '{spec}' is not in the local Hugging Face cache and the hub cannot be reached "
                           "(no network?). Use --model tiny (built-in), a local folder, or a .gguf file.")
    return _from_pretrained(spec, dtype)


def load_model(spec=TINY, device=None, dtype=None):
    """(model, tokenizer) for `spec`, in eval mode with requires_grad False on every weight."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if spec == TINY:
        with tempfile.TemporaryDirectory() as tmp:
            build_tiny(tmp)
            model, tok = _from_pretrained(tmp, dtype)
    elif spec.endswith(".gguf"):
        if not os.path.isfile(spec):
            raise FileNotFoundError(f"no such GGUF file: {spec}")
        try:
            import gguf  # noqa: F401  (transformers needs it to read the file)
        except ImportError:
            raise RuntimeError("loading a .gguf file needs the optional package: pip install gguf")
        model, tok = _from_pretrained(os.path.dirname(os.path.abspath(spec)), dtype, gguf_file=os.path.basename(spec))
    elif os.path.isdir(spec):
        model, tok = _from_pretrained(spec, dtype)
    elif spec.startswith((".", "/", "~")) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", spec):
        raise FileNotFoundError(f"no such model folder or file: {spec}")
    else:
        model, tok = _load_pretrained(spec, dtype)
    if tok.pad_token_id is None:  # left padding needs a pad id; it is always masked out
        tok.pad_token = tok.eos_token
    model.to(device).eval().requires_grad_(False)
    # PyTorch tries cuDNN attention first on Hopper, and it builds a plan for every shape new to the process (~0.1 s a
    # forward + backward; the update meets new lengths every micro-batch): flash / memory-efficient instead
    torch.backends.cuda.enable_cudnn_sdp(False)  # docs/benchmarks.md: a row updates in ~30% less time
    return model, tok


def load_default_model(spec=None, device=None):
    """What `--model` means in the scripts: `spec` when given; when omitted, Qwen3-0.6B if it can be
    loaded, else the tiny model, saying so in one line. Returns (model, tokenizer, spec used)."""
    if spec is not None:
        return (*load_model(spec, device), spec)
    try:
        return (*load_model(DEFAULT_MODEL, device), DEFAULT_MODEL)
    except (RuntimeError, OSError) as e:
        print(f"note: {DEFAULT_MODEL} could not be loaded ({str(e).splitlines()[0][:90]}...); "
              f"using the built-in tiny model instead.", flush=True)
        return (*load_model(TINY, device), TINY)


def chat_ids(tokenizer, text):
    """Token ids of one user message plus the assistant generation prompt, thinking disabled."""
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=False)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def stop_ids(model, tokenizer):
    """Ids that end an assistant turn: the tokenizer's and generation config's EOS, plus the chat
    end markers when the vocabulary has them."""
    gen_eos = model.generation_config.eos_token_id
    markers = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    ids = {tokenizer.eos_token_id, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])}
    ids.update(i for i in markers if isinstance(i, int) and i != tokenizer.unk_token_id)  # absent: None or unk
    return sorted(ids - {None})
