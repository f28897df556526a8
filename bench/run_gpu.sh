#!/usr/bin/env bash
# forecastd vs PyTorch on one CUDA GPU: finds a Python whose torch sees a GPU and runs
# bench/run_gpu.py with every argument passed through. Builds nothing: gpu_bench comes from
# bench/make_gpu_bundle.sh (the bundle's bin/) or a CUDA build's bench/ (--bin-dir).
#
#   bench/run_gpu.sh --bin-dir /tmp/bundle/bin                 the default workloads
#   bench/run_gpu.sh --bin-dir DIR --case lstm_h256_l2_bi:1,32 --iters 50
#   bench/run_gpu.sh --bin-dir build-gpub/bench --device cpu --case lstm_h128_l2:1   (no GPU)
#   FORECASTD_TORCH_PYTHON=/path/to/python bench/run_gpu.sh ...
#
# The interpreter, first that imports torch (and, without --device cpu, sees a CUDA device):
# $FORECASTD_TORCH_PYTHON; /opt/torch/.venv/bin/python; /opt/torch-venv/bin/python; python3.
# With $OUT set, run_gpu.py writes its table and JSON line there too.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

want_cuda=1
for arg in "$@"; do
  case "${arg}" in
    --device=cpu) want_cuda=0 ;;
    cpu) [[ "${prev:-}" == "--device" ]] && want_cuda=0 ;;
  esac
  prev="${arg}"
done

# shellcheck source=bench/torch_python.sh
source "${repo}/bench/torch_python.sh"
find_torch_python run_gpu.sh "${want_cuda}" || exit 2

# The Python driver records this command line as what produced the figures.
source "${repo}/bench/bench_command.sh"
export_bench_command bench/run_gpu.sh "$@"
export PYTHONUNBUFFERED=1
exec "${python}" bench/run_gpu.py "$@"
