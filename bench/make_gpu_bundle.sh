#!/usr/bin/env bash
# Builds what bench/gpu_session.sh runs on the GPU host (gpu_bench, step_gpu_bench, forecastd and
# every *_gpu_test) in a CUDA build directory here, and packs them with ../shared/gpu/bundle.sh into .gpu/bundle.tgz,
# which travels to the GPU host (carry `.gpu`, it is git-ignored).
#
#   bench/make_gpu_bundle.sh                    build dir build-gpub, 2 jobs
#   FORECASTD_GPU_BUILD_DIR=build-x JOBS=8 bench/make_gpu_bundle.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"
build="${FORECASTD_GPU_BUILD_DIR:-build-gpub}"
jobs="${JOBS:-2}"
bundler="${repo}/../shared/gpu/bundle.sh"
[[ -x "${bundler}" || -f "${bundler}" ]] || { echo "make_gpu_bundle.sh: ${bundler} missing" >&2; exit 2; }

cmake -S . -B "${build}" -DCMAKE_BUILD_TYPE=Release -DFORECASTD_CUDA=ON >/dev/null
# The GPU test targets, as CMake knows them (tests/CMakeLists.txt: forecastd_gpu_test).
mapfile -t tests < <(cmake --build "${build}" --target help | sed -n 's/^\.\.\. \(.*_gpu_test\)$/\1/p')
[[ ${#tests[@]} -gt 0 ]] || { echo "make_gpu_bundle.sh: no *_gpu_test targets" >&2; exit 1; }
cmake --build "${build}" -j"${jobs}" --target gpu_bench step_gpu_bench forecastd forecastctl \
  "${tests[@]}"

programs=("${build}/bench/gpu_bench" "${build}/bench/step_gpu_bench" "${build}/server/forecastd"
          "${build}/client/forecastctl")
for t in "${tests[@]}"; do
  programs+=("$(find "${build}/tests" -name "${t}" -type f -perm -u+x | head -1)")
done
bash "${bundler}" .gpu "${programs[@]}"
ls -l .gpu/bundle.tgz
echo "bundle: $(du -h .gpu/bundle.tgz | cut -f1) (${#programs[@]} programs); on the GPU host:" \
     "OUT=... bash bench/gpu_session.sh (carry .gpu)"
