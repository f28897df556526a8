#!/usr/bin/env bash
# Fetches Triton's perf_analyzer (from the tritonclient 2.41.1 wheel) and the libraries it needs
# that a bare Debian 12 / CUDA host may lack (libb64, libcudart 12, OpenSSL 3) into one directory,
# so forecastd can be load-tested over KServe v2 gRPC on a GPU host without network.
# The binary is stripped to keep the directory small (~19 MiB). On the host:
#   LD_LIBRARY_PATH=DIR DIR/perf_analyzer -i grpc -u HOST:PORT -m MODEL [--shared-memory cuda]
#
#   bench/fetch_perf_analyzer.sh [DIR]      DIR defaults to .gpu/perf_analyzer (git-ignored)
# Needs pip and apt-get download (Debian sources) here; does nothing if DIR is already complete.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
dest="${1:-.gpu/perf_analyzer}"
python="${PYTHON:-python3}"
files=(perf_analyzer libb64.so.0d libcudart.so.12 libssl.so.3 libcrypto.so.3)

complete() {
  for f in "${files[@]}"; do [[ -f "${dest}/${f}" ]] || return 1; done
  LD_LIBRARY_PATH="${dest}" "${dest}/perf_analyzer" --version >/dev/null 2>&1
}
if complete; then
  echo "fetch_perf_analyzer.sh: ${dest} already complete"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
mkdir -p "${dest}"

# perf_analyzer and libcudart.so.12 come from PyPI wheels.
"${python}" -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
  --python-version 3.11 -d "${work}" tritonclient==2.41.1
"${python}" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  --python-version 3.11 -d "${work}" nvidia-cuda-runtime-cu12==12.9.79
"${python}" -m zipfile -e "${work}"/tritonclient-2.41.1-*.whl "${work}/tc"
"${python}" -m zipfile -e "${work}"/nvidia_cuda_runtime_cu12-*.whl "${work}/cudart"
strip -o "${dest}/perf_analyzer" "${work}/tc/tritonclient-2.41.1.data/data/bin/perf_analyzer"
cp -L "${work}/cudart/nvidia/cuda_runtime/lib/libcudart.so.12" "${dest}/"

# libb64 and OpenSSL 3 come from Debian packages (libz, libstdc++ and glibc are on every host).
(cd "${work}" && apt-get download -q libb64-0d libssl3)
for deb in "${work}"/libb64-0d_*.deb "${work}"/libssl3_*.deb; do dpkg-deb -x "${deb}" "${work}/deb"; done
lib="${work}/deb/usr/lib/x86_64-linux-gnu"
cp -L "${lib}/libb64.so.0d" "${lib}/libssl.so.3" "${lib}/libcrypto.so.3" "${dest}/"
chmod 755 "${dest}"/*

LD_LIBRARY_PATH="${dest}" ldd "${dest}/perf_analyzer"
if LD_LIBRARY_PATH="${dest}" ldd "${dest}/perf_analyzer" | grep -q 'not found'; then
  echo "fetch_perf_analyzer.sh: perf_analyzer has unresolved libraries" >&2
  exit 1
fi
complete || { echo "fetch_perf_analyzer.sh: perf_analyzer --version failed" >&2; exit 1; }
LD_LIBRARY_PATH="${dest}" "${dest}/perf_analyzer" --version
ls -l "${dest}"
du -sh "${dest}"
