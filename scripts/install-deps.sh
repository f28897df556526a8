#!/usr/bin/env bash
# Installs every package forecastd needs to build and test, with apt-get. Idempotent: when
# everything is already installed it changes nothing and touches no network.
# Debian 12 (bookworm) is the reference platform; Ubuntu 24.04 (noble) is supported too, with
# the few package names that differ there in the case statement below.
# CUDA, cuDNN and NCCL are not Debian packages: the build uses them when they are present.
# --build-only: only what building forecastd needs (configure with -DBUILD_TESTING=OFF), as
# the Dockerfile's build stage does; without it, everything the tests need as well.
set -euo pipefail

build_only=0
case "${1:-}" in
  "") ;;
  --build-only) build_only=1 ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake make pkg-config git ccache clang-format
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev libdnnl-dev
  libcli11-dev nlohmann-json3-dev
  # KServe REST (server/kserve_http.h says why this library); Debian 12 and Ubuntu 24.04 both
  # package it.
  libcpp-httplib-dev
)
test_packages=(
  catch2
  # clang++ checks the lock annotations, which g++ ignores (tests/lint).
  clang
  # The golden tests check that models forecastd writes load into PyTorch.
  python3 python3-numpy python3-torch
  # A Python gRPC client checks the KServe API (stubs generated at test time); tritonclient's
  # HTTP client, which no release packages, comes from pip into .venv-test (test_venv below).
  python3-grpcio python3-protobuf python3-venv
  # The deploy checks: a real Prometheus (and promtool) scrapes forecastd; the Kubernetes
  # manifests are parsed as YAML.
  prometheus python3-yaml
  # forecastctl's completion scripts are run in each shell they are written for.
  zsh fish
)
if [[ $build_only -eq 0 ]]; then
  packages+=("${test_packages[@]}")
fi

# The names above are Debian 12's; `replace` maps those another release names differently (to
# nothing where it has no such package).
declare -A replace=()
torch_note=0
if [[ -r /etc/os-release ]]; then
  # shellcheck disable=SC1091
  . /etc/os-release
  case "${ID:-}:${VERSION_ID:-}" in
    debian:12) ;;
    ubuntu:24.04)
      # Ubuntu 24.04 packages no PyTorch, which golden_test's check that forecastd-written
      # models load into PyTorch needs: test_venv below adds it from pip.
      replace[python3-torch]=
      torch_note=1
      ;;
    *) echo "install-deps: ${PRETTY_NAME:-this system} is untested; trying the Debian 12 package names" >&2 ;;
  esac
fi
wanted=()
for pkg in "${packages[@]}"; do
  if [[ ! -v "replace[$pkg]" ]]; then
    wanted+=("$pkg")
  elif [[ -n ${replace[$pkg]} ]]; then
    wanted+=("${replace[$pkg]}")
  fi
done
packages=("${wanted[@]}")

# The tests' Python: a venv beside the sources (.venv-test, git-ignored) that sees the system's
# packages and adds from pip what no release packages: tritonclient[http] (the KServe REST
# integration test), and where a release packages no PyTorch, PyTorch's CPU build.
# tests/CMakeLists.txt uses its interpreter when it exists. Idempotent like the rest: nothing is
# fetched when the venv already imports them.
test_venv() {
  [[ $build_only -eq 0 ]] || return 0
  local repo venv
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${repo}/.venv-test"
  # The distribution's interpreter, whose packages (numpy, grpcio, torch) the venv must see,
  # whatever python3 comes first on PATH.
  local python=/usr/bin/python3
  if [[ ! -x "${venv}/bin/python3" ]]; then
    echo "install-deps: making the tests' Python environment ${venv}"
    "${python}" -m venv --system-site-packages "${venv}"
  fi
  if ! "${venv}/bin/python3" -c 'import tritonclient.http' >/dev/null 2>&1; then
    echo "install-deps: installing tritonclient[http] into ${venv}"
    # Pinned to the distribution's numpy, which its torch was built against: pip would
    # otherwise put a newer numpy in front of it.
    "${venv}/bin/pip" install -q 'tritonclient[http]' \
      "numpy==$("${python}" -c 'import numpy; print(numpy.__version__)')"
  fi
  if [[ $torch_note -eq 1 ]] && ! "${venv}/bin/python3" -c 'import torch' >/dev/null 2>&1; then
    echo "install-deps: this release packages no PyTorch; installing its CPU build into ${venv}"
    "${venv}/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu ||
      "${venv}/bin/pip" install -q torch
  fi
}

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  test_venv
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
test_venv
