#!/usr/bin/env bash
# Regenerates data/eu_stock_markets.csv and data/taylor.csv from the Debian packages that ship
# them (r-base-core's datasets package and r-cran-forecast), installing those first when they
# are missing. The files are committed; this is how they were made and how to check them:
#   scripts/data/export-series.sh && git diff --exit-code data/
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v Rscript > /dev/null || ! Rscript -e 'library(forecast)' > /dev/null 2>&1; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  $sudo apt-get install -y --no-install-recommends r-base-core r-cran-forecast
fi
mkdir -p data
Rscript scripts/data/export_series.R data
