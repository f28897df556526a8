#!/usr/bin/env bash
# Training samples/s on 1 and 2 GPUs, forecastd's data-parallel engine against PyTorch's
# DistributedDataParallel (NCCL, two processes) on the same GPUs: finds a Python whose torch sees
# the GPUs and runs bench/run_gpu_multi.py with every argument passed through. Builds nothing:
# gpu_bench comes from bench/make_gpu_bundle.sh (the bundle's bin/) or a CUDA build's bench/.
#
#   bench/run_gpu_multi.sh --bin-dir /tmp/bundle/bin            the default rows on cuda:0,cuda:1
#   bench/run_gpu_multi.sh --bin-dir DIR --quick                fewer steps and rows
#   bench/run_gpu_multi.sh --bin-dir DIR --case transformer_large:bf16:64 --iters 50
#   FORECASTD_TORCH_PYTHON=/path/to/python bench/run_gpu_multi.sh ...
#
# The interpreter is found as run_gpu.sh finds it (bench/torch_python.sh). When gpu_bench cannot
# find libnccl on its own, the NCCL library of that interpreter's PyTorch (the nvidia-nccl wheel)
# is put on LD_LIBRARY_PATH. With $OUT set, run_gpu_multi.py writes its table and JSON line there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

# shellcheck source=bench/torch_python.sh
source "${repo}/bench/torch_python.sh"
find_torch_python run_gpu_multi.sh 1 || exit 2

bin_dir="${repo}/build-gpub/bench"
prev=""
for arg in "$@"; do
  case "${arg}" in
    --bin-dir=*) bin_dir="${arg#--bin-dir=}" ;;
    *) [[ "${prev}" == "--bin-dir" ]] && bin_dir="${arg}" ;;
  esac
  prev="${arg}"
done
if [[ -x "${bin_dir}/gpu_bench" ]] &&
    ldd "${bin_dir}/gpu_bench" 2>/dev/null | grep -q 'libnccl.*not found'; then
  nccl_lib="$("${python}" -c 'import os, nvidia.nccl as n
print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null || true)"
  if [[ -n "${nccl_lib}" && -d "${nccl_lib}" ]]; then
    echo "run_gpu_multi.sh: gpu_bench finds no libnccl; using ${nccl_lib}" >&2
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH}:}${nccl_lib}"
  else
    echo "run_gpu_multi.sh: gpu_bench finds no libnccl (ldd ${bin_dir}/gpu_bench), nor does" \
         "${python}'s PyTorch ship one" >&2
  fi
fi

# The Python driver records this command line as what produced the figures.
source "${repo}/bench/bench_command.sh"
export_bench_command bench/run_gpu_multi.sh "$@"
export PYTHONUNBUFFERED=1
exec "${python}" bench/run_gpu_multi.py "$@"
