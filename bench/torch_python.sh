# shellcheck shell=bash
# Sourced by the bench/*.sh wrappers that run PyTorch on a GPU (run_gpu.sh, run_gpu_multi.sh):
# find_torch_python NAME WANT_CUDA sets `python` to the first interpreter that imports torch and
# numpy (and, with WANT_CUDA=1, whose torch sees a CUDA device): $FORECASTD_TORCH_PYTHON;
# /opt/torch/.venv/bin/python; /opt/torch-venv/bin/python; python3. NAME prefixes its messages.
# Returns 2, having said why, when there is none.

# Prints why $1 cannot run the benchmark, or nothing when it can.
torch_problem() {
  "$1" - "$2" <<'PY' 2>&1 || true
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

# shellcheck disable=SC2034  # `python` is the result, read by the script that sourced this
find_torch_python() {
  local name="$1" want_cuda="$2" problem candidate
  python=""
  if [[ -n "${FORECASTD_TORCH_PYTHON:-}" ]]; then
    problem="$(torch_problem "${FORECASTD_TORCH_PYTHON}" "${want_cuda}")"
    if [[ -n "${problem}" ]]; then
      echo "${name}: FORECASTD_TORCH_PYTHON=${FORECASTD_TORCH_PYTHON}: ${problem}" >&2
      return 2
    fi
    python="${FORECASTD_TORCH_PYTHON}"
    return 0
  fi
  for candidate in /opt/torch/.venv/bin/python /opt/torch-venv/bin/python \
      "$(command -v python3 || true)" /usr/bin/python3; do
    [[ -n "${candidate}" && -x "${candidate}" ]] || continue
    problem="$(torch_problem "${candidate}" "${want_cuda}")"
    if [[ -z "${problem}" ]]; then
      python="${candidate}"
      return 0
    fi
    echo "${name}: skipping ${candidate}: ${problem}" >&2
  done
  echo "${name}: no Python with torch (and a CUDA device) found; set FORECASTD_TORCH_PYTHON" >&2
  return 2
}
