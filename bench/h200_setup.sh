#!/usr/bin/env bash
# Runs ON the GPU machine, after ../shared/tools/prepare-model-chunks.sh here and one device call per
# chunk (0.5b: mkdir -p /root/mdl && mv .model/part* /root/mdl/; 1.5b: the same with .model15 and /root/mdl15: every
# call makes the folder, as the first call of a message may be refused while the later ones run). Joins the GGUF, installs
# the carried gguf wheel, and converts the model once to a bf16 Hugging Face folder (/root/mdl/hf or
# /root/mdl15/hf), which loads in seconds; the GGUF itself dequantises for a minute or more on every load.
# Idempotent: does nothing once the folder is complete.
# Use in the last chunk's call (carry the last chunk and .whl):  bash bench/h200_setup.sh [0.5b|1.5b] && ...
set -euo pipefail
# the joined GGUF's sha256 (../shared/tools/prepare-model-chunks.sh): a chunk missing or cut short is one line naming
# the chunks there, and they are kept (removed only once the joined file is whole), so only the missing ones need sending again
dir=/root/mdl sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 n=10
[ "${1:-0.5b}" = 1.5b ] && dir=/root/mdl15 sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 n=22
[ -f $dir/hf/.done ] && exit 0  # written after the weights and the tokenizer: a cut-off conversion reruns
if [ ! -f $dir/model.gguf ] || [ "$(sha256sum < $dir/model.gguf | cut -d' ' -f1)" != $sha ]; then
    mkdir -p $dir && have=$(ls $dir | grep -c '^part' || true)
    cat $dir/part* > $dir/model.gguf.tmp 2> /dev/null || true
    if [ "$(sha256sum < $dir/model.gguf.tmp | cut -d' ' -f1)" != $sha ]; then
        rm -f $dir/model.gguf.tmp
        echo "h200_setup.sh: error: the $have chunk(s) in $dir ($(ls $dir | grep '^part' | tr '\n' ' ')) do not join to the model (sha256): $n are expected, one per call" >&2
        exit 1
    fi
    mv $dir/model.gguf.tmp $dir/model.gguf && rm -f $dir/part*
fi
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site python3 - $dir <<'PY'
import sys
from models import load_model
model, tok = load_model(sys.argv[1] + "/model.gguf")
model.hf_quantizer = None  # the weights are plain bf16 tensors now; save_pretrained refuses a "quantized" model
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(sys.argv[1] + "/hf")
tok.save_pretrained(sys.argv[1] + "/hf")
PY
touch $dir/hf/.done
echo "model ready: $dir/hf"
