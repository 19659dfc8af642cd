#!/usr/bin/env bash
# Create .venv with real SGLang 0.5.23 for CPU tests and demos. Idempotent: a stamp
# file records the hash of this script and pyproject.toml; a matching stamp is a no-op.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="${SGLANG_EAGLE3_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
stamp="$venv/.sglang_eagle3_stamp"
want="$(cat scripts/setup_env.sh pyproject.toml | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "setup_env: $venv is up to date"
  exit 0
fi

[[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
"${pip[@]}" --upgrade pip
# torch 2.14.1 is the version sglang 0.5.23 pins; this machine serves it from a local
# file. The CPU build of torch 2.13 does not work: sglang imports torchvision.
"${pip[@]}" torch==2.14.1 torchvision==0.29.1
# sglang without its CUDA-only dependencies; then the light runtime deps it imports.
"${pip[@]}" --no-deps sglang==0.5.23
"${pip[@]}" torch==2.14.1 torchvision==0.29.1 \
  transformers==5.19.0 tokenizers==0.23.2 apache-tvm-ffi==0.1.11 compressed-tensors==0.18.0 \
  xgrammar==0.2.7 openai==2.8.0 sentencepiece==0.2.1 orjson psutil pybase64 requests pillow \
  msgspec pyzmq IPython aiohttp dill einops gguf partial-json-parser setproctitle uvicorn \
  fastapi uvloop jsonschema soundfile python-multipart safetensors kernels triton \
  prometheus-client interegular llguidance modelscope tqdm numpy
# speculators 0.9.0 for its real config classes and model code (no vLLM).
"${pip[@]}" --no-deps speculators==0.9.0 hs-connectors==0.9.0
"${pip[@]}" torch==2.14.1 transformers==5.19.0 datasets pydantic typer
# PD disaggregation (tests and demo): SGLang's mooncake_tcp transfer backend and its router.
# Mooncake's CPU build imports only with Debian's libibverbs1.
if ! ldconfig -p | grep -q "libibverbs.so.1 "; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq libibverbs1 >/dev/null
  else
    echo "setup_env: PD tests need Debian's libibverbs1: sudo apt-get install libibverbs1" >&2
    exit 1
  fi
fi
"${pip[@]}" mooncake-transfer-engine-non-cuda==0.3.13.post1 sglang-router==0.3.2
# The project itself, editable, with its test tools.
"${pip[@]}" -e ".[test]"
echo "$want" > "$stamp"
echo "setup_env: $venv ready"
