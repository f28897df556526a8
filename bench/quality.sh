#!/usr/bin/env bash
# Forecast quality on the shipped series (data/eu_stock_markets.csv, data/taylor.csv), side by
# side in one run, CPU only: forecastd trained through `forecastctl train` and scored over KServe
# REST, the same configs trained by a PyTorch loop, NeuralForecast's LSTM and NHITS, and the
# naive and seasonal naive forecasts, all on one chronological split and evaluation set.
# bench/README.md ("Forecast quality") says what is run and how it is scored.
#
#   bench/quality.sh                          both series, lstm/gru/transformer, seeds 1,2,3
#   bench/quality.sh --quick                  smoke run: 1 seed, 3 epochs
#   bench/quality.sh --series taylor --archs lstm --seeds 1,2 --epochs 20 --out /tmp/q
#   bench/quality.sh --skip-neuralforecast --skip-torch
#
# Builds nothing (needs build/server/forecastd and build/client/forecastctl, or --build-dir).
# The interpreter, first that imports torch and numpy: $FORECASTD_TORCH_PYTHON;
# .venv-bench/bin/python; /usr/bin/python3 (Debian's torch, only as a fall-back). Unless
# --skip-neuralforecast, NeuralForecast is pip-installed into that interpreter's environment when
# it cannot be imported, with torch pinned to the installed version (a constraint file) so that
# pip keeps it; a failed install is reported and the other methods still run.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

skip_nf=0
out="/tmp/quality"
prev=""
for arg in "$@"; do
  case "${arg}" in
    --skip-neuralforecast) skip_nf=1 ;;
    --out=*) out="${arg#*=}" ;;
    -h | --help) skip_nf=1 ;;
  esac
  if [[ "${prev}" == "--out" ]]; then out="${arg}"; fi
  prev="${arg}"
done

has_torch() {
  "$1" -c 'import numpy, torch' > /dev/null 2>&1
}

python=""
for candidate in "${FORECASTD_TORCH_PYTHON:-}" .venv-bench/bin/python /usr/bin/python3; do
  if [[ -n "${candidate}" && -x "${candidate}" ]] && has_torch "${candidate}"; then
    python="${candidate}"
    break
  fi
  if [[ -n "${candidate}" ]]; then echo "quality.sh: skipping ${candidate}: no torch" >&2; fi
done
if [[ -z "${python}" ]]; then
  echo "quality.sh: no Python with torch and numpy; create .venv-bench (bench/run_cpu.sh does)" \
       "or set FORECASTD_TORCH_PYTHON" >&2
  exit 2
fi
echo "quality.sh: python ${python} ($("${python}" -c \
  'import torch; print("torch", torch.__version__, "at", torch.__file__)'))"

nf_problem=""
if [[ "${skip_nf}" == 0 ]] && ! "${python}" -c 'import neuralforecast' > /dev/null 2>&1; then
  mkdir -p "${out}"
  torch_version="$("${python}" -c 'import torch; print(torch.__version__.split("+")[0])')"
  constraints="${out}/pip-constraints.txt"
  echo "torch==${torch_version}" > "${constraints}"
  before="$("${python}" -m pip freeze 2>/dev/null | sort || true)"
  echo "quality.sh: installing neuralforecast into ${python}'s environment (torch kept at" \
       "${torch_version}; log ${out}/pip-neuralforecast.log)"
  if "${python}" -m pip install -c "${constraints}" neuralforecast \
      > "${out}/pip-neuralforecast.log" 2>&1; then
    after="$("${python}" -m pip freeze 2>/dev/null | sort || true)"
    echo "quality.sh: installed:"
    comm -13 <(echo "${before}") <(echo "${after}") | sed 's/^/  /'
  else
    nf_problem="pip install neuralforecast failed ($(tail -n 1 "${out}/pip-neuralforecast.log"))"
    echo "quality.sh: ${nf_problem}; NeuralForecast will NOT be run" >&2
  fi
  if [[ -z "${nf_problem}" ]] && ! "${python}" -c 'import neuralforecast' > /dev/null 2>&1; then
    nf_problem="neuralforecast installed but cannot be imported"
  fi
fi

extra=()
if [[ -n "${nf_problem}" ]]; then extra=(--neuralforecast-unavailable "${nf_problem}"); fi
export QUALITY_COMMAND="bench/quality.sh"
exec "${python}" bench/quality.py "$@" "${extra[@]}"
