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
loralib (that would fight a sampler that flips modes and switches adapters): `merge_adapter` for export, and
`with merged(model):` for sampling, which keeps the original weights and puts them back (a bf16 merge/unmerge
round trip would not restore them exactly).

Usage: add_adapter(model, "generator"); with use_adapter(model, "generator"): logits = model(ids).logits
       save_adapter(model, "generator", "run/generator.safetensors", {"step": 10})
Tests: python -m pytest -q tests/test_lora.py
"""
import contextlib
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
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
        self.lora_A = nn.ParameterDict()      # name -> (r, in_features), fp32
        self.lora_B = nn.ParameterDict()      # name -> (out_features, r), fp32
        self.lora_dropout = nn.ModuleDict()   # name -> Dropout or Identity
        self.adapters = {}                    # name -> {"rank": int, "alpha": float, "dropout": float}
        self.active = None                    # adapter used by forward; None = base layer only

    # Forward the attributes HF code sometimes reads from a projection (e.g. `q_proj.weight.dtype`).
    weight = property(lambda self: self.base.weight)
    bias = property(lambda self: self.base.bias)
    in_features = property(lambda self: self.base.in_features)
    out_features = property(lambda self: self.base.out_features)

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
        A = self.lora_A[name].to(x.dtype)             # fp32 master -> compute dtype (no-op in fp32)
        B = self.lora_B[name].to(x.dtype)
        return y + F.linear(F.linear(self.lora_dropout[name](x), A), B) * self.scaling(name)

    def merged_weight(self, name: str) -> torch.Tensor:
        """W + (alpha/r) * B @ A, computed in fp32, in W's dtype."""
        W = self.base.weight
        return (W.float() + self.lora_B[name].float() @ self.lora_A[name].float() * self.scaling(name)).to(W.dtype)

    def extra_repr(self) -> str:
        return f"adapters={list(self.adapters)}, active={self.active!r}"


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


def _slots(module: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, layer) for every nn.Linear / LoRALinear under `module` (the blocks), depth first in
    module order; never inside a LoRALinear."""
    out = []
    for attr, child in module.named_children():
        if isinstance(child, (LoRALinear, nn.Linear)):
            out.append((module, attr, child))
        else:
            out += _slots(child)
    return out


def _wrappers(model: nn.Module, name: str | None = None) -> list[tuple[str, LoRALinear]]:
    """(module path, wrapper) for every LoRALinear, or only those holding adapter `name`; in model order."""
    return [(p, m) for p, m in model.named_modules()
            if isinstance(m, LoRALinear) and (name is None or name in m.adapters)]


def _check_name(model: nn.Module, name: str) -> list[tuple[str, LoRALinear]]:
    if not (found := _wrappers(model, name)):
        raise ValueError(f"unknown adapter {name!r}; known adapters: {adapter_names(model)}")
    return found


def _params(model: nn.Module, name: str) -> dict[str, nn.Parameter]:
    """Adapter `name`'s parameters keyed "<module path>.lora_A" / ".lora_B": A then B per layer, in model order."""
    return {f"{p}.{ab}": getattr(m, ab)[name] for p, m in _check_name(model, name) for ab in ("lora_A", "lora_B")}


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
    slots = _slots(_find_blocks(model))
    available = sorted({attr for _, attr, _ in slots})
    if targets is not None:
        if (unknown := sorted(set(targets) - set(available))) or not targets:
            raise ValueError(f"unknown LoRA target(s) {unknown or targets}; the linear layers in the blocks are "
                             f"named {available}")
        slots = [s for s in slots if s[1] in targets]
    active = active_adapter(model)
    for parent, attr, layer in slots:
        if not isinstance(layer, LoRALinear):
            layer = LoRALinear(layer)
            setattr(parent, attr, layer)
        layer.add(name, int(rank), alpha, dropout, generator)
        layer.train(layer.base.training)   # new modules start in train mode: an eval model must not drop out
    set_adapter(model, active)   # new wrappers get the active adapter too; freezes the base and the new adapter
    return len(slots)


def delete_adapter(model: nn.Module, name: str) -> None:
    """Remove adapter `name` (the wrappers stay; with no adapter active they return the base output)."""
    for _, m in _check_name(model, name):
        m.remove(name)


def adapter_names(model: nn.Module) -> list[str]:
    """Names of all adapters in the model, in the order they were added."""
    return list(dict.fromkeys(n for _, m in _wrappers(model) for n in m.adapters))


def active_adapter(model: nn.Module) -> str | None:
    return next((m.active for _, m in _wrappers(model)), None)


def set_adapter(model: nn.Module, name: str | None) -> None:
    """Make `name` the adapter every forward uses (None = the base model); only its parameters require
    grad. Cheap: a walk over the modules and a requires_grad flag per parameter, no copies."""
    if name is not None:
        _check_name(model, name)
    for p in model.parameters():     # base, embeddings, lm_head and every other adapter: frozen
        p.requires_grad_(False)
    for _, m in _wrappers(model):
        m.active = name
        if name in m.adapters:
            m.lora_A[name].requires_grad_(True)
            m.lora_B[name].requires_grad_(True)


@contextlib.contextmanager
def use_adapter(model: nn.Module, name: str | None):
    """`with use_adapter(model, "evaluator"): ...` then restore the previously active adapter."""
    previous = active_adapter(model)
    set_adapter(model, name)
    try:
        yield model
    finally:
        set_adapter(model, previous)


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
    wrappers = _check_name(model, name)
    targets = sorted({path.rsplit(".", 1)[-1] for path, _ in wrappers})
    return {**wrappers[0][1].adapters[name], "targets": targets}


# ----------------------------------------------------------------------------- files

def save_adapter(model: nn.Module, name: str, path: str, metadata: dict | None = None) -> None:
    """Write adapter `name` as safetensors (tmp file + os.replace, so a crash never leaves half a file).
    Metadata: rank, alpha, dropout, targets (JSON) and the user's metadata with values as str."""
    cfg = _adapter_config(model, name)
    if clash := sorted(set(metadata or {}) & {"format", "rank", "alpha", "dropout", "targets"}):
        raise ValueError(f"metadata keys {clash} are reserved for the adapter config")
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    meta.update(format="lora-v1", rank=str(cfg["rank"]), alpha=repr(cfg["alpha"]), dropout=repr(cfg["dropout"]),
                targets=json.dumps(cfg["targets"]))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        save_file(adapter_state_dict(model, name), tmp, metadata=meta)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):   # only if writing failed
            os.remove(tmp)


def load_adapter(model: nn.Module, name: str, path: str) -> dict:
    """Load a saved adapter into `name`, creating it with the file's rank/alpha/dropout/targets if it does
    not exist. Raises ValueError naming the file if it does not fit the model. Returns the metadata."""
    with safe_open(path, framework="pt") as f:
        meta = dict(f.metadata() or {})
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if meta.get("format") != "lora-v1":
        raise ValueError(f"{path}: not an adapter file written by save_adapter (metadata format missing)")
    rank, alpha, dropout = int(meta["rank"]), float(meta["alpha"]), float(meta["dropout"])
    created = name not in adapter_names(model)
    if created:
        try:
            add_adapter(model, name, rank, alpha, dropout, targets=json.loads(meta["targets"]))
        except ValueError as e:
            raise ValueError(f"{path} does not fit this model: {e}") from None
    try:
        cfg = _adapter_config(model, name)
        if (cfg["rank"], cfg["alpha"]) != (rank, alpha):
            raise ValueError(f"{path} has rank {rank}, alpha {alpha} but adapter {name!r} has rank {cfg['rank']}, "
                             f"alpha {cfg['alpha']}")
        params = _params(model, name)
        missing, unexpected = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
        if missing or unexpected:
            raise ValueError(f"{path} does not fit this model: {len(missing)} missing keys {missing[:3]}, "
                             f"{len(unexpected)} unexpected keys {unexpected[:3]}")
        for k, p in params.items():
            if tensors[k].shape != p.shape:
                raise ValueError(f"{path} does not fit this model: {k} has shape {tuple(tensors[k].shape)} "
                                 f"in the file, {tuple(p.shape)} in the model")
    except ValueError:
        if created:   # do not leave a half-made adapter behind
            delete_adapter(model, name)
        raise
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(tensors[k])
    return meta


def merge_adapter(model: nn.Module, name: str) -> int:
    """For export: W += (alpha/r) * B @ A (computed in fp32, stored in W's dtype) in every layer holding
    `name`, then replace *all* wrappers by their plain nn.Linear (other adapters are dropped). The model
    is then an ordinary HF model for save_pretrained. Returns the number of merged layers."""
    count = len(_check_name(model, name))
    with torch.no_grad():
        for path, m in _wrappers(model):
            if name in m.adapters:
                m.base.weight.copy_(m.merged_weight(name))
            parent, _, attr = path.rpartition(".")
            setattr(model.get_submodule(parent), attr, m.base)   # get_submodule("") is the model
    return count
