#!/usr/bin/env bash
# Is training repeatable on this machine? Runs the same short training twice, then twice more under
# torch.use_deterministic_algorithms(True, warn_only=True) with CUBLAS_WORKSPACE_CONFIG=:4096:8, and prints for each
# pair how many of the final adapters' tensors are bit-identical and each step's reward and per-role loss side by side,
# then the kernels that warned (under warn_only=True: those with no deterministic implementation, and those whose
# deterministic variant warn_only=True leaves off, such as flash attention's backward). A third pair, strict, runs with
# warn_only=False: kernels that have a deterministic variant (flash attention's backward) then use it, and any that
# has none stops the run with an error.
# It tests the guess in docs/results.md (atomics in backward kernels); it measures nothing about speed.
#   bash bench/determinism.sh MODEL DATA [OUTDIR] [train.py flags...]    e.g.
#   bash bench/determinism.sh /root/mdl/hf .campaign/data/gsm8k/train.jsonl /tmp/det --problems 8 --group 4
# MODES (default "plain det") picks the pairs: plain, det (its warnings print after its first run), strict.
set -u
M=$1 D=$2 O=${3:-/tmp/det}; shift 3 2> /dev/null || shift $#
mkdir -p "$O"
train() {  # DETERMINISTIC WARN_ONLY NAME [flags]
    local det=$1 warn=$2 name=$3; shift 3
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python -c "import sys, runpy, torch
torch.use_deterministic_algorithms($det, warn_only=$warn)
sys.argv = ['train.py'] + sys.argv[1:]
runpy.run_path('train.py', run_name='__main__')" --model "$M" --data "$D" --steps 3 --seed 0 --out "$O/$name" "$@" \
        > "$O/$name.log" 2>&1 || { echo "$name failed:"; tail -n 3 "$O/$name.log"; }
}
compare() {  # A B
    [ -s "$O/$1/metrics.jsonl" ] && [ -s "$O/$2/metrics.jsonl" ] || { echo "$1 vs $2: not compared, a run failed"; return; }
    python - "$O/$1" "$O/$2" <<'PY'
import json, sys, pathlib
a, b = (pathlib.Path(p) for p in sys.argv[1:])
ma, mb = ([json.loads(l) for l in open(p / "metrics.jsonl")] for p in (a, b))
for x, y in zip(ma, mb):
    la = {r: v["loss"] for r, v in x["roles"].items()}
    lb = {r: v["loss"] for r, v in y["roles"].items()}
    print(f"step {x['step']}: reward {x['reward_mean']:.4f} / {y['reward_mean']:.4f}, loss {la} / {lb}")
from safetensors.torch import load_file  # tensors, not bytes: safetensors writes its metadata in no fixed order
n = same = 0; worst = 0.0
for p in sorted(a.glob("step_*/*.safetensors")):
    ta, tb = load_file(p), load_file(b / p.relative_to(a))
    for k in ta:
        n += 1; same += bool((ta[k] == tb[k]).all()); worst = max(worst, (ta[k] - tb[k]).abs().max().item())
print(f"{a.name} vs {b.name}: {same} of {n} adapter tensors bit-identical, largest difference {worst:.3g}")
PY
}
case " ${MODES:-plain det} " in *" plain "*)
    train False True plain-a "$@"; train False True plain-b "$@"; compare plain-a plain-b ;;
esac
case " ${MODES:-plain det} " in *" det "*)
    train True True det-a "$@"
    echo "warnings about determinism in det-a's log (kernels that ran a non-deterministic algorithm):"
    grep -i "determinis" "$O/det-a.log" | sed "s/.*Warning: //" | cut -c1-240 | sort | uniq -c
    train True True det-b "$@"; compare det-a det-b ;;
esac
case " ${MODES:-plain det} " in *" strict "*)
    train True False strict-a "$@"; train True False strict-b "$@"; compare strict-a strict-b ;;
esac
