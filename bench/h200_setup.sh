#!/usr/bin/env bash
# Runs ON the GPU machine, after ../shared/tools/prepare-model-chunks.sh here and one device call per
# chunk (0.5b: mkdir -p /root/mdl && mv .model/part* /root/mdl/; 1.5b: the same with .model15 and /root/mdl15: every
# call makes the folder, as the first call of a message may be refused while the later ones run). Joins the GGUF, installs
# the carried gguf wheel, and converts the model once to a bf16 Hugging Face folder (/root/mdl/hf or
# /root/mdl15/hf), which loads in seconds; the GGUF itself dequantises for a minute or more on every load.
# Idempotent: does nothing once the folder is complete.
# Use in the last chunk's call (carry the last chunk and .whl):  bash bench/h200_setup.sh [0.5b|1.5b] && ...
set -euo pipefail
dir=/root/mdl; [ "${1:-0.5b}" = 1.5b ] && dir=/root/mdl15
[ -f $dir/hf/.done ] && exit 0  # written after the weights and the tokenizer: a cut-off conversion reruns
if ls $dir/part* >/dev/null 2>&1; then cat $dir/part* > $dir/model.gguf && rm $dir/part*; fi  # a rerun has the .gguf
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
