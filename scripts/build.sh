#!/usr/bin/env bash
# Configures and builds forecastd with CMake: the one build command, used by `make build` (and so
# by `make run`, `make test` and CI) and by the Dockerfile. Settings come from the environment,
# with the Makefile's names and defaults:
#   BUILD_DIR       build directory                        (build)
#   BUILD_TYPE      CMAKE_BUILD_TYPE                       (Release)
#   JOBS            parallel build jobs                    (nproc)
#   CMAKE_FLAGS     extra configure arguments, split on white space, e.g.
#                   "-DFORECASTD_CUDA=OFF -DBUILD_TESTING=OFF"
#   TARGETS         when set, only these targets (space-separated), e.g. what `make run` needs
#   INSTALL_PREFIX  when set, `cmake --install` into it after the build (the Dockerfile's use)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-$(nproc)}
# shellcheck disable=SC2206  # word splitting is the point: CMAKE_FLAGS holds several arguments
extra_flags=(${CMAKE_FLAGS:-})

set -x
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${extra_flags[@]}"
# shellcheck disable=SC2206  # as CMAKE_FLAGS: a list of target names
targets=(${TARGETS:-})
if [[ ${#targets[@]} -gt 0 ]]; then
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
if [[ -n ${INSTALL_PREFIX:-} ]]; then
  cmake --install "$BUILD_DIR" --prefix "$INSTALL_PREFIX"
fi
