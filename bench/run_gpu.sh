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

# Prints why $1 cannot run the benchmark, or nothing when it can.
torch_problem() {
  "$1" - "${want_cuda}" <<'PY' 2>&1 || true
import sys
try:
    import numpy  # noqa: F401
    import torch
except Exception as e:  # noqa: BLE001
    print(f"cannot import torch and numpy: {e}")
    sys.exit(0)
if sys.argv[1] == "1" and not torch.cuda.is_available():
    print(f"torch {torch.__version__} at {torch.__file__} sees no CUDA device")
PY
}

python=""
if [[ -n "${FORECASTD_TORCH_PYTHON:-}" ]]; then
  problem="$(torch_problem "${FORECASTD_TORCH_PYTHON}")"
  if [[ -n "${problem}" ]]; then
    echo "run_gpu.sh: FORECASTD_TORCH_PYTHON=${FORECASTD_TORCH_PYTHON}: ${problem}" >&2
    exit 2
  fi
  python="${FORECASTD_TORCH_PYTHON}"
else
  for candidate in /opt/torch/.venv/bin/python /opt/torch-venv/bin/python \
      "$(command -v python3 || true)" /usr/bin/python3; do
    [[ -n "${candidate}" && -x "${candidate}" ]] || continue
    problem="$(torch_problem "${candidate}")"
    if [[ -z "${problem}" ]]; then
      python="${candidate}"
      break
    fi
    echo "run_gpu.sh: skipping ${candidate}: ${problem}" >&2
  done
fi
if [[ -z "${python}" ]]; then
  echo "run_gpu.sh: no Python with torch (and a CUDA device) found; set FORECASTD_TORCH_PYTHON" >&2
  exit 2
fi

# The Python driver records this command line as what produced the figures.
source "${repo}/bench/bench_command.sh"
export_bench_command bench/run_gpu.sh "$@"
export PYTHONUNBUFFERED=1
exec "${python}" bench/run_gpu.py "$@"
