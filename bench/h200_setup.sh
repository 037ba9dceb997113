#!/usr/bin/env bash
# Runs ON the GPU machine, after ../shared/tools/prepare-model-chunks.sh here and one device call per
# chunk (mv .model/part* /root/mdl/). Joins the GGUF, installs the carried gguf wheel, and converts the
# model once to a bf16 Hugging Face folder (/root/mdl/hf), which loads in seconds; the GGUF itself
# dequantises for about a minute on every load. Idempotent: does nothing when /root/mdl/hf exists.
# Use in the last chunk's call (carry .model/part9 and .whl):  bash bench/h200_setup.sh && ...
set -euo pipefail
[ -f /root/mdl/hf/model.safetensors ] && exit 0
cat /root/mdl/part? > /root/mdl/model.gguf && rm /root/mdl/part?
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site python3 - <<'PY'
from models import load_model
model, tok = load_model("/root/mdl/model.gguf")
model.hf_quantizer = None  # the weights are plain bf16 tensors now; save_pretrained refuses a "quantized" model
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained("/root/mdl/hf")
tok.save_pretrained("/root/mdl/hf")
PY
echo "model ready: /root/mdl/hf"
