#!/usr/bin/env bash
# The demo models `make run` serves, trained by forecastd itself, through its Train path, on a
# real series: data/eu_stock_markets.csv (daily closes of DAX, SMI, CAC and FTSE, 1991-1998;
# data/README.md says where it comes from). For each of scripts/demo_models/demo_*.json it
#
#   1. starts forecastd (--devices cpu) on an empty repository in a temporary directory, with
#      --data-dir data;
#   2. runs, exactly (the seed makes the run reproducible on one machine):
#        forecastctl train NAME --config scripts/demo_models/NAME.json \
#            --csv eu_stock_markets.csv --timestamp-column time --epochs 40 --batch-size 32 \
#            --lr 1e-3 --patience 5 --validation-fraction 0.2 --seed 1 --promote
#      (the first 80% of the days train, the last 20% validate; the best epoch's weights are
#      kept);
#   3. scores the published version on the validation days in index points with
#      scripts/demo_models/score.py (through KServe REST), next to the naive forecast that
#      repeats the last close;
#   4. writes models/NAME/config.json (the config, its description saying what it was trained
#      on and its validation scores) and models/NAME/1/ (model.safetensors and lineage.json, as
#      forecastd published them);
#
# then models/sample_input.csv, the series' last 40 days. About 30 s on 2 cores.
#
# usage: scripts/train_demo_models.sh [BUILD_DIR]   (default: build; needs forecastd and
#        forecastctl built there, e.g. by `make build`)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-${BUILD_DIR:-build}}"
case "${build}" in /*) ;; *) build="${repo}/${build}" ;; esac
forecastd="${build}/server/forecastd"
forecastctl="${build}/client/forecastctl"
for binary in "${forecastd}" "${forecastctl}"; do
  if [[ ! -x "${binary}" ]]; then
    echo "train_demo_models.sh: ${binary} is missing: run 'make build' first" >&2
    exit 2
  fi
done

work="$(mktemp -d /tmp/forecastd-demo-XXXXXX)"
daemon_pid=""
cleanup() {
  if [[ -n "${daemon_pid}" ]]; then
    kill "${daemon_pid}" 2>/dev/null || true
    wait "${daemon_pid}" 2>/dev/null || true
  fi
  rm -rf "${work}"
}
trap cleanup EXIT

# Free ports on the loopback interface, chosen by the kernel.
read -r grpc_port http_port metrics_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')

mkdir -p "${work}/models"
"${forecastd}" --model-repository "${work}/models" --data-dir "${repo}/data" --devices cpu \
  --grpc-address "127.0.0.1:${grpc_port}" --http-address "127.0.0.1:${http_port}" \
  --metrics-address "127.0.0.1:${metrics_port}" > "${work}/forecastd.log" 2>&1 &
daemon_pid=$!
ctl=("${forecastctl}" --address "127.0.0.1:${grpc_port}")
for _ in $(seq 1 100); do
  if "${ctl[@]}" status > /dev/null 2>&1; then break; fi
  if ! kill -0 "${daemon_pid}" 2>/dev/null; then
    echo "train_demo_models.sh: forecastd exited:" >&2
    cat "${work}/forecastd.log" >&2
    exit 1
  fi
  sleep 0.2
done

for name in demo_lstm demo_transformer; do
  echo "== ${name}"
  "${ctl[@]}" train "${name}" --config "${repo}/scripts/demo_models/${name}.json" \
    --csv eu_stock_markets.csv --timestamp-column time --epochs 40 --batch-size 32 --lr 1e-3 \
    --patience 5 --validation-fraction 0.2 --seed 1 --promote
  python3 "${repo}/scripts/demo_models/score.py" --http "127.0.0.1:${http_port}" \
    --model "${name}" --csv "${repo}/data/eu_stock_markets.csv" \
    --config "${work}/models/${name}/config.json" > "${work}/${name}.scores.json"
  python3 - "${work}/models/${name}" "${work}/${name}.scores.json" "${repo}/models/${name}" <<'PY'
import json
import os
import shutil
import sys

trained, scores_path, out = sys.argv[1:4]
with open(os.path.join(trained, "config.json"), encoding="utf-8") as f:
    config = json.load(f)
with open(os.path.join(trained, "1", "lineage.json"), encoding="utf-8") as f:
    lineage = json.load(f)
with open(scores_path, encoding="utf-8") as f:
    scores = json.load(f)
model, naive = scores["all"]["model"], scores["all"]["naive"]
per_target = "; ".join(
    f"{name} {s['model']['mae']:.1f} (naive {s['naive']['mae']:.1f})"
    for name, s in scores["targets"].items())
config["description"] = (
    f"{config['description']}. Trained by forecastd (scripts/train_demo_models.sh) on "
    f"data/eu_stock_markets.csv: its first {int(lineage['dataRows']) - scores['validation_rows']} "
    f"of {lineage['dataRows']} days, seed {lineage['seed']}; best epoch {lineage.get('bestEpoch')}, validation loss "
    f"{float(lineage.get('bestValidationLoss', 'nan')):.5f} (MSE, standardised units). On the "
    f"last {scores['validation_rows']} days ({scores['validation_windows']} windows), MAE in "
    f"index points {model['mae']:.1f} against {naive['mae']:.1f} for repeating the last close "
    f"(RMSE {model['rmse']:.1f} against {naive['rmse']:.1f}); per target {per_target}")
shutil.rmtree(os.path.join(out, "1"), ignore_errors=True)
os.makedirs(os.path.join(out, "1"))
for f in ("model.safetensors", "lineage.json"):
    shutil.copy(os.path.join(trained, "1", f), os.path.join(out, "1", f))
with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
print(config["description"])
PY
done

# The sample CSV: the series' last 40 days (one lookback), the four closes without the time
# column (the benchmarks read its first F columns).
{ head -n 1 "${repo}/data/eu_stock_markets.csv"; tail -n 40 "${repo}/data/eu_stock_markets.csv"; } |
  cut -d, -f2- > "${repo}/models/sample_input.csv"
echo "wrote models/demo_lstm, models/demo_transformer and models/sample_input.csv"
