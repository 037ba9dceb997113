"""LoRA from scratch: several named low-rank adapters in one model, one of them active at a time.

Every nn.Linear in the transformer blocks (or those whose attribute name is in `targets`) becomes a LoRALinear
that keeps the layer as `.base` and adds, for the active adapter only,

    y = base(x) + (alpha / r) * B @ A @ dropout(x)        A: (r, in) kaiming-uniform, B: (out, r) zeros

so a fresh adapter (B = 0) reproduces the base model, and with none active the output is base(x), bit for bit.
`set_adapter` picks the adapter of the next forward and makes only its parameters require grad, so one AdamW per
adapter over `adapter_parameters(model, name)` trains exactly that role. Adapters are fp32 master weights cast to
the input's dtype in forward (a bf16 model runs bf16 matmuls): cast the model *before* add_adapter, as a later cast
would cast the adapters too (moving devices later is fine).

Left out: quantized bases (refused), DoRA / rsLoRA, LoRA on embeddings or lm_head, per-layer ranks, several adapters
in one forward (our workflows run one role per sampler call). Merging is explicit, never on .eval() as in
loralib (that would fight a sampler that flips modes and switches adapters): `with merged(model):` for sampling,
which keeps the original weights and puts them back (a bf16 merge/unmerge round trip would not restore them exactly).
A merged model to save is PEFT's job (`export_peft`, then `merge_and_unload()`).

Files: `save_adapter` writes one safetensors file per adapter (keys "<module path>.lora_A" / ".lora_B", the path
relative to the causal LM; rank, alpha, dropout, targets in its metadata). `export_peft` (`python lora.py export`)
rewrites such files as PEFT LoRA folders (adapter_config.json + adapter_model.safetensors with PEFT's keys
"base_model.model.<module path>.lora_A.weight"; PEFT's scale lora_alpha / r is ours) that
peft.PeftModel.from_pretrained(base, folder) loads with our logits, as do tools that read PEFT's format.
`load_adapter` reads both (train.py --init-adapters starts a run from PEFT folders). PEFT options our forward does
not compute are refused (rsLoRA, per-layer alphas) or do not fit on loading (DoRA, biases, per-layer ranks,
modules_to_save). peft itself is not needed: the format is written and read here.

Usage: add_adapter(model, "generator"); set_adapter(model, "generator"); logits = model(ids).logits
       save_adapter(model, "generator", "run/generator.safetensors", {"step": 10})
       python lora.py export runs/my-run peft/      # peft/<adapter>/ from the run's last checkpoint
Tests: python -m pytest -q tests/test_lora.py
"""
import contextlib
import glob
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

# Where HF causal LMs keep their transformer blocks (tried in order, relative to the model we are given).
_BLOCK_PATHS = ("model.layers", "model.language_model.layers", "model.decoder.layers", "transformer.h",
                "gpt_neox.layers", "layers")


class LoRALinear(nn.Module):
    """A frozen nn.Linear (`.base`, its original weight and bias) plus named low-rank adapters."""

    def __init__(self, base: nn.Linear):
        super().__init__()
        if not base.weight.dtype.is_floating_point:
            raise TypeError(f"LoRA needs a floating-point base layer, got weight dtype {base.weight.dtype} "
                            "(quantized bases are not supported)")
        self.base = base
        self.lora_A, self.lora_B = nn.ParameterDict(), nn.ParameterDict()  # name -> A (r, in), B (out, r); fp32
        self.lora_dropout = nn.ModuleDict()   # name -> Dropout or Identity
        self.adapters = {}                    # name -> {"rank": int, "alpha": float, "dropout": float}
        self.active = None                    # adapter used by forward; None = base layer only

    # Forward the attributes HF code sometimes reads from a projection (e.g. `q_proj.weight.dtype`).
    weight, bias, in_features, out_features = (property(lambda self, a=a: getattr(self.base, a))
                                               for a in ("weight", "bias", "in_features", "out_features"))

    def add(self, name: str, rank: int, alpha: float, dropout: float, generator=None):
        # kaiming_uniform_(a=sqrt(5)) on (r, in) is U(-1/sqrt(in), 1/sqrt(in)), as nn.Linear's own init and
        # loralib. Drawn on CPU so a seeded generator gives the same adapter on any device.
        bound, device = 1.0 / math.sqrt(self.in_features), self.base.weight.device
        A = torch.empty(rank, self.in_features, dtype=torch.float32).uniform_(-bound, bound, generator=generator)
        self.lora_A[name] = nn.Parameter(A.to(device))
        self.lora_B[name] = nn.Parameter(torch.zeros(self.out_features, rank, dtype=torch.float32, device=device))
        self.lora_dropout[name] = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.adapters[name] = {"rank": rank, "alpha": float(alpha), "dropout": float(dropout)}

    def remove(self, name: str):
        del self.lora_A[name], self.lora_B[name], self.lora_dropout[name], self.adapters[name]
        if self.active == name:
            self.active = None

    def scaling(self, name: str) -> float:
        return self.adapters[name]["alpha"] / self.adapters[name]["rank"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if (name := self.active) not in self.adapters:   # None, or this layer is not a target of the adapter
            return y
        A, B = self.lora_A[name].to(x.dtype), self.lora_B[name].to(x.dtype)  # fp32 masters -> compute dtype
        return y + F.linear(F.linear(self.lora_dropout[name](x), A), B) * self.scaling(name)

    def merged_weight(self, name: str) -> torch.Tensor:
        """W + (alpha/r) * B @ A, computed in fp32, in W's dtype."""
        W = self.base.weight
        return (W.float() + self.lora_B[name].float() @ self.lora_A[name].float() * self.scaling(name)).to(W.dtype)


# ----------------------------------------------------------------------------- finding layers

def _find_blocks(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks: a known HF path, else the shallowest ModuleList holding linear layers."""
    for path in _BLOCK_PATHS:
        with contextlib.suppress(AttributeError):
            if isinstance(blocks := model.get_submodule(path), nn.ModuleList):
                return blocks
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList)
             and any(isinstance(s, nn.Linear) for s in m.modules())]
    if not lists:
        raise ValueError(f"no transformer blocks (an nn.ModuleList with nn.Linear layers) in {type(model).__name__}")
    return min(lists, key=lambda nm: nm[0].count("."))[1]


def _slots(module: nn.Module) -> Iterator[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, layer) for every nn.Linear / LoRALinear under `module` (the blocks), depth first in
    module order; never inside a LoRALinear."""
    for attr, child in module.named_children():
        if isinstance(child, (LoRALinear, nn.Linear)):
            yield module, attr, child
        else:
            yield from _slots(child)


def _wrappers(model: nn.Module, name: str | None = None) -> list[tuple[str, LoRALinear]]:
    """(module path, wrapper) for every LoRALinear, or only those holding adapter `name` (ValueError if none
    does: an unknown name); in model order."""
    found = [(p, m) for p, m in model.named_modules()
             if isinstance(m, LoRALinear) and (name is None or name in m.adapters)]
    if name is not None and not found:
        raise ValueError(f"unknown adapter {name!r}; known adapters: {adapter_names(model)}")
    return found


def _params(model: nn.Module, name: str) -> dict[str, nn.Parameter]:
    """Adapter `name`'s parameters keyed "<module path>.lora_A" / ".lora_B": A then B per layer, in model order."""
    return {f"{p}.{ab}": getattr(m, ab)[name] for p, m in _wrappers(model, name) for ab in ("lora_A", "lora_B")}


# ----------------------------------------------------------------------------- adapters

def add_adapter(model: nn.Module, name: str, rank: int = 64, alpha: float = 32.0, dropout: float = 0.0,
                targets: list[str] | None = None, generator: torch.Generator | None = None) -> int:
    """Add adapter `name` to the linear layers of the blocks (all, or those whose attribute name is in
    `targets`); freezes every base parameter. Does not change the active adapter. `generator` (a CPU
    torch.Generator) seeds A. Returns the number of layers that got the adapter."""
    # names become ParameterDict/ModuleDict keys (ParameterDict's attributes include all of ModuleDict's)
    if not isinstance(name, str) or not name or "." in name or hasattr(nn.ParameterDict(), name):
        raise ValueError(f"invalid adapter name {name!r}: need a non-empty str without '.' that is not a "
                         "ParameterDict/ModuleDict attribute")
    if name in adapter_names(model):
        raise ValueError(f"adapter {name!r} already exists")
    if int(rank) != rank or rank < 1 or not 0.0 <= dropout < 1.0:
        raise ValueError(f"need an integer rank >= 1 and 0 <= dropout < 1, got rank={rank}, dropout={dropout}")
    targets = [targets] if isinstance(targets, str) else targets
    slots = list(_slots(_find_blocks(model)))
    available = sorted({attr for _, attr, _ in slots})
    if targets is not None:
        if (unknown := sorted(set(targets) - set(available))) or not targets:
            raise ValueError(f"unknown LoRA target(s) {unknown or targets}; the linear layers in the blocks are "
                             f"named {available}")
        slots = [s for s in slots if s[1] in targets]
    active = active_adapter(model)
    for parent, attr, layer in slots:
        if not isinstance(layer, LoRALinear):
            setattr(parent, attr, layer := LoRALinear(layer))
        layer.add(name, int(rank), alpha, dropout, generator)
        layer.train(layer.base.training)   # new modules start in train mode: an eval model must not drop out
    set_adapter(model, active)   # new wrappers get the active adapter too; freezes the base and the new adapter
    return len(slots)


def delete_adapter(model: nn.Module, name: str) -> None:
    """Remove adapter `name` (the wrappers stay; with no adapter active they return the base output)."""
    for _, m in _wrappers(model, name):
        m.remove(name)


def adapter_names(model: nn.Module) -> list[str]:
    """Names of all adapters in the model, in the order they were added."""
    return list(dict.fromkeys(n for _, m in _wrappers(model) for n in m.adapters))


def active_adapter(model: nn.Module) -> str | None:
    return next((m.active for _, m in _wrappers(model)), None)


def set_adapter(model: nn.Module, name: str | None) -> None:
    """Make `name` the adapter every forward uses (None = the base model); only its parameters require
    grad. Cheap: a walk over the modules and a requires_grad flag per parameter, no copies."""
    trained = adapter_parameters(model, name) if name is not None else []   # raises for an unknown name
    model.requires_grad_(False)     # base, embeddings, lm_head and every other adapter: frozen
    for _, m in _wrappers(model):
        m.active = name
    for p in trained:
        p.requires_grad_(True)


@contextlib.contextmanager
def merged(model: nn.Module):
    """`with merged(model): sample(...)`: the active adapter folded into the base weights for the
    duration (W + (alpha/r) B A, in fp32, stored in W's dtype), so sampling runs one matmul per layer
    instead of the adapter's extra matmuls, casts and adds. The original weights come back untouched
    (kept, not subtracted). Outputs differ from the unmerged forward by rounding only; the trainer
    recomputes log-probs with the unmerged forward anyway. Costs one weight copy of the adapted layers."""
    saved = []
    try:
        with torch.no_grad():
            for _, m in _wrappers(model):
                if (name := m.active) in m.adapters:
                    saved.append((m, m.base.weight.data, name))
                    m.base.weight.data, m.active = m.merged_weight(name), None
        yield model
    finally:
        for m, data, name in saved:
            m.base.weight.data, m.active = data, name


def adapter_parameters(model: nn.Module, name: str) -> list[nn.Parameter]:
    """Adapter `name`'s parameters (A then B per layer, in model order): give these to its optimizer."""
    return list(_params(model, name).values())


def adapter_state_dict(model: nn.Module, name: str) -> dict[str, torch.Tensor]:
    """CPU copies keyed "<module path>.lora_A/.lora_B"; the adapter name is not in the keys, so a file
    saved from "generator" loads into "evaluator" (or into another model with the same architecture)."""
    return {k: p.detach().to("cpu", copy=True) for k, p in _params(model, name).items()}


def _adapter_config(model: nn.Module, name: str) -> dict:
    wrappers = _wrappers(model, name)
    return {**wrappers[0][1].adapters[name], "targets": sorted({path.rsplit(".", 1)[-1] for path, _ in wrappers})}


# ----------------------------------------------------------------------------- files

PEFT_PREFIX = "base_model.model."   # PEFT's key of our "<module path>.lora_A" is PEFT_PREFIX + that + ".weight"


def _write(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str]) -> None:
    """safetensors through a tmp file + os.replace, so a crash never leaves half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):   # only if writing failed
            os.remove(tmp)


def save_adapter(model: nn.Module, name: str, path: str, metadata: dict | None = None) -> None:
    """Write adapter `name` as safetensors (atomically). Metadata: rank, alpha, dropout, targets (JSON) and the
    user's metadata with values as str."""
    cfg, metadata = _adapter_config(model, name), metadata or {}
    ours = {"format": "lora-v1", "rank": str(cfg["rank"]), "alpha": repr(cfg["alpha"]), "dropout": repr(cfg["dropout"]),
            "targets": json.dumps(cfg["targets"])}
    if clash := sorted(set(metadata) & set(ours)):
        raise ValueError(f"metadata keys {clash} are reserved for the adapter config")
    _write(adapter_state_dict(model, name), path, {**{str(k): str(v) for k, v in metadata.items()}, **ours})


def read_adapter(path: str) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors keyed "<module path>.lora_A/.lora_B", config) of a file written by save_adapter or of a PEFT LoRA
    folder (adapter_config.json + adapter_model.safetensors). The config has rank, alpha, dropout, targets (the
    layer names the keys hold) and the file's other metadata (save_adapter's as str; PEFT's base model as "model").
    Refuses PEFT options our forward does not compute (rsLoRA's alpha / sqrt(r), per-layer alphas); other ones
    (DoRA, biases, per-layer ranks, embeddings) show up as keys or shapes that do not fit the model on loading."""
    peft = os.path.isdir(path)
    try:
        with safe_open(os.path.join(path, "adapter_model.safetensors") if peft else path, framework="pt") as f:
            meta = dict(f.metadata() or {})
            # PEFT's keys to ours (which never start with the prefix nor end in ".weight": a no-op on them)
            tensors = {k.removeprefix(PEFT_PREFIX).removesuffix(".weight"): f.get_tensor(k) for k in f.keys()}
    except SafetensorError as e:  # a file cut off or not safetensors at all: a ValueError naming it
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from None
    if peft:
        try:  # not JSON, not an object, no r or lora_alpha: a ValueError naming the file
            c = json.loads(Path(path, "adapter_config.json").read_text())
            meta = {"rank": c["r"], "alpha": c["lora_alpha"], "dropout": c.get("lora_dropout", 0.0),
                    "targets": sorted({k.split(".")[-2] for k in tensors}), "model": c.get("base_model_name_or_path")}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}/adapter_config.json: not a PEFT LoRA config ({type(e).__name__}: {e})") from None
        if c.get("peft_type") != "LORA" or c.get("use_rslora") or c.get("alpha_pattern"):
            raise ValueError(f"{path}: not a plain PEFT LoRA adapter (peft_type LORA, no rsLoRA, no alpha_pattern)")
    elif meta.get("format") != "lora-v1":
        raise ValueError(f"{path}: not an adapter file written by save_adapter (metadata format missing)")
    cfg = {"rank": int(meta["rank"]), "alpha": float(meta["alpha"]), "dropout": float(meta["dropout"])}
    return tensors, {**meta, **cfg, "targets": meta["targets"] if peft else json.loads(meta["targets"])}


def load_adapter(model: nn.Module, name: str, path: str) -> dict:
    """Load an adapter file or a PEFT LoRA folder (read_adapter) into `name`, creating it with the file's
    rank/alpha/dropout/targets if it does not exist (an existing one keeps its dropout). Raises ValueError naming
    the file if it does not fit the model or the existing adapter. Returns the file's config."""
    (tensors, cfg), created = read_adapter(path), name not in adapter_names(model)
    try:
        if created:
            add_adapter(model, name, cfg["rank"], cfg["alpha"], cfg["dropout"], targets=cfg["targets"])
        show = lambda c: f"rank {c['rank']}, alpha {c['alpha']}, targets {','.join(c['targets'])}"
        if show(cfg) != show(have := _adapter_config(model, name)):
            raise ValueError(f"it has {show(cfg)}; the adapter here has {show(have)}")
        params = _params(model, name)
        missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
        if missing or extra:
            raise ValueError(f"{len(missing)} missing keys {missing[:3]}, {len(extra)} unexpected keys {extra[:3]}")
        if bad := [k for k, p in params.items() if tensors[k].shape != p.shape]:
            raise ValueError(f"{bad[0]} has shape {tuple(tensors[bad[0]].shape)} in the file, "
                             f"{tuple(params[bad[0]].shape)} in the model")
    except ValueError as e:
        if created and name in adapter_names(model):   # do not leave a half-made adapter behind
            delete_adapter(model, name)
        raise ValueError(f"{path} does not fit this model (adapter {name!r}): {e}") from None
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(tensors[k])
    return cfg


def export_peft(src: str, out: str) -> list[str]:
    """Write each adapter of `src` (a file written by save_adapter, a checkpoint folder of them, or a run folder:
    its last checkpoint) as a PEFT LoRA folder out/<adapter name>/ that peft.PeftModel.from_pretrained(base,
    folder) loads with our logits: the same A and B, and the same scale (ours alpha / rank, PEFT's lora_alpha / r
    without rsLoRA). Our module paths are relative to the causal LM, which PEFT wraps as base_model.model. PEFT
    puts target_modules on every linear layer so named, also outside the blocks should a model have such (they
    get no weights, so B = 0: no change). No base model is loaded. Returns the folders written."""
    src = (sorted(glob.glob(os.path.join(glob.escape(src), "step_*[0-9]"))) or [src])[-1]  # a run: its last step
    files = sorted(glob.glob(os.path.join(glob.escape(src), "*.safetensors"))) if os.path.isdir(src) else [src]
    if not files:
        raise ValueError(f"{src}: no adapter files (need a run folder, a checkpoint folder or an adapter file)")
    folders = []
    for path in files:
        tensors, cfg = read_adapter(path)
        folders.append(folder := os.path.join(out, os.path.basename(path).removesuffix(".safetensors")))
        _write({PEFT_PREFIX + k + ".weight": v for k, v in tensors.items()},
               os.path.join(folder, "adapter_model.safetensors"), {"format": "pt"})
        config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": cfg.get("model"),
                  "r": cfg["rank"], "lora_alpha": cfg["alpha"], "use_rslora": False, "lora_dropout": cfg["dropout"],
                  "target_modules": cfg["targets"], "bias": "none", "use_dora": False, "inference_mode": True}
        Path(folder, "adapter_config.json").write_text(json.dumps(config, indent=2))
    return folders


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "export":  # bad input: one line, exit 2 (as train.py's and eval.py's)
        sys.exit(print("usage: python lora.py export RUN_OR_CHECKPOINT_OR_ADAPTER_FILE OUT  (one PEFT folder per adapter)", file=sys.stderr) or 2)
    try:
        print("\n".join(export_peft(*sys.argv[2:])))
    except (OSError, ValueError) as e:
        sys.exit(print(f"error: {e}", file=sys.stderr) or 2)
