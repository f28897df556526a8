#!/usr/bin/env bash
# One tick-stream step (state mode) of lstm_h128_l2 on one CUDA GPU: forecastd's fused step
# kernels, the gather / cuDNN / scatter path they replace, and PyTorch (LSTMCell over states
# gathered with index_select, written back with index_copy_), each as CUDA graph replays in the
# same run, with the error of ours against PyTorch. Builds nothing: step_gpu_bench comes from a
# CUDA build's bench/ or a bundle's bin/ (--bin-dir). Other arguments go to step_gpu_bench
# (e.g. --streams 1,64,1024,4096 --cell gru).
#
#   bench/step_gpu.sh --bin-dir /tmp/bundle/bin
#   FORECASTD_TORCH_PYTHON=/path/to/python bench/step_gpu.sh --bin-dir build/bench
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin_dir=""
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -n "${bin_dir}" ]] || { echo "usage: step_gpu.sh --bin-dir DIR [step_gpu_bench args]" >&2; exit 2; }

python="${FORECASTD_TORCH_PYTHON:-}"
for p in /opt/torch/.venv/bin/python /opt/torch-venv/bin/python python3; do
  [[ -n "${python}" ]] && break
  if command -v "${p}" >/dev/null && "${p}" -c 'import torch, numpy' 2>/dev/null; then python="${p}"; fi
done
[[ -n "${python}" ]] || { echo "step_gpu.sh: no python with torch and numpy" >&2; exit 1; }

dir="$(mktemp -d)"
trap 'rm -rf "${dir}"' EXIT
"${bin_dir}/step_gpu_bench" --dir "${dir}" "${args[@]}" | tee "${dir}/ours.jsonl"
"${python}" "${here}/step_torch.py" --dir "${dir}" --ours "${dir}/ours.jsonl"
