#!/usr/bin/env bash
# Builds forecastd's container image from the repository's Dockerfile, with Docker where an
# engine answers, else with buildah (podman alongside), and prints the image's size.
#
#   scripts/container/build-images.sh                  the CPU image, forecastd:cpu
#   scripts/container/build-images.sh --variant cuda   the CUDA image, forecastd:cuda
#   scripts/container/build-images.sh --tag NAME       another name
#   JOBS=8 scripts/container/build-images.sh           build parallelism inside the image
#   make images / make images-cuda                     the same
#
# The Dockerfile's CPU variant starts from debian:12 and ends on debian:12-slim. Where those
# cannot be pulled (no registry reachable, as on air-gapped build hosts), this script makes
# them locally from the distribution's package mirror with Debian's mmdebstrap and imports them
# under the same names, and says so; the Dockerfile itself is the one `docker build` uses, with
# nothing in it for this route. The buildah route also needs `podman`, `runc`, `uidmap` and
# `fuse-overlayfs`; as root on Debian or Ubuntu the script installs what is missing with apt.
#
# The CUDA variant starts from NVIDIA's images (nvidia/cuda:<CUDA_VERSION>-cudnn-devel and
# -runtime, Ubuntu 24.04). Where those cannot be pulled, the buildah route builds it on Debian
# 12 instead, with the CUDA toolkit of this machine (CUDA_HOME, default /usr/local/cuda: nvcc,
# cuDNN and NCCL in one tree), and says so: the build base is debian:12 with that tree copied to
# /usr/local/cuda-<version> (localhost/forecastd-cuda-toolkit:<version>-debian12), the runtime
# base debian:12-slim, to which the build's stage-runtime.sh copies the CUDA libraries forecastd
# loads. The Dockerfile takes the two bases as build arguments (CUDA_BUILD_IMAGE,
# CUDA_RUNTIME_IMAGE).
#
# Environment: JOBS (default: every core), FORECASTD_ENGINE=docker|buildah (default: docker
# when `docker info` answers), DEBIAN_MIRROR (default http://deb.debian.org/debian),
# CUDA_HOME (above), CONTAINERS_CONF (buildah/podman; by default a file setting
# `default_ulimits = []`, so that builds run where raising resource limits is refused, as in
# some sandboxes).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
variant=cpu
tag=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --variant) variant="${2:?--variant needs cpu or cuda}"; shift 2 ;;
    --variant=*) variant="${1#--variant=}"; shift ;;
    --tag) tag="${2:?--tag needs a name}"; shift 2 ;;
    --tag=*) tag="${1#--tag=}"; shift ;;
    -h|--help) sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-images.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ "${variant}" != cpu && "${variant}" != cuda ]]; then
  echo "build-images.sh: --variant must be cpu or cuda, not '${variant}'" >&2
  exit 2
fi
tag="${tag:-forecastd:${variant}}"
jobs="${JOBS:-$(nproc)}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
say() { echo "build-images: $*"; }

engine="${FORECASTD_ENGINE:-}"
if [[ -z "${engine}" ]]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  else
    engine=buildah
  fi
fi

if [[ "${engine}" == docker ]]; then
  say "building ${tag} with docker (BuildKit)"
  DOCKER_BUILDKIT=1 docker build --build-arg VARIANT="${variant}" --build-arg JOBS="${jobs}" \
    -t "${tag}" "${repo}"
  docker image ls "${tag}" --format 'build-images: {{.Repository}}:{{.Tag}} {{.Size}}'
  exit 0
fi
if [[ "${engine}" != buildah ]]; then
  echo "build-images.sh: FORECASTD_ENGINE must be docker or buildah, not '${engine}'" >&2
  exit 2
fi

# --- buildah: the tools, then the base images, then the build.
needed=()
for tool in buildah:buildah podman:podman runc:runc newuidmap:uidmap fuse-overlayfs:fuse-overlayfs \
            mmdebstrap:mmdebstrap; do
  command -v "${tool%%:*}" >/dev/null || needed+=("${tool##*:}")
done
if [[ ${#needed[@]} -gt 0 ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing ${needed[*]} (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${needed[@]}" >/dev/null
  else
    echo "build-images.sh: missing ${needed[*]}; install them (Debian/Ubuntu: sudo apt-get" \
         "install ${needed[*]}) or use Docker" >&2
    exit 1
  fi
fi
if [[ -z "${CONTAINERS_CONF:-}" ]]; then
  conf_dir="${XDG_CACHE_HOME:-${HOME}/.cache}/forecastd"
  mkdir -p "${conf_dir}"
  printf '[containers]\ndefault_ulimits = []\n' > "${conf_dir}/containers.conf"
  export CONTAINERS_CONF="${conf_dir}/containers.conf"
fi

# Makes docker.io/library/debian:<tag> from Debian 12 (bookworm) with mmdebstrap, as Debian's
# own images are: /usr merged without the usrmerge package (which would bring perl into every
# image), apt set to delete downloaded packages after installing them (Debian's docker-clean),
# no apt lists. slim: also without documentation, manual pages, locales and info files, for the
# packages installed later too.
make_base() {
  local tag_name="$1" slim="$2" tar
  tar="$(mktemp --suffix=.tar)"
  local args=(--variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
              --customize-hook="${docker_clean_hook}")
  # shellcheck disable=SC2016  # $1 is mmdebstrap's: the tree the hook customises
  local clean_hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*'
  if [[ "${slim}" == 1 ]]; then
    args+=(--dpkgopt='path-exclude=/usr/share/doc/*'
           --dpkgopt='path-include=/usr/share/doc/*/copyright'
           --dpkgopt='path-exclude=/usr/share/man/*'
           --dpkgopt='path-exclude=/usr/share/locale/*'
           --dpkgopt='path-exclude=/usr/share/info/*'
           --customize-hook="${clean_hook}")
  fi
  local kind="minbase"
  [[ "${slim}" == 1 ]] && kind="minbase, slim"
  say "debian:${tag_name} cannot be pulled: making it from ${mirror} with mmdebstrap" \
      "(Debian 12, ${kind})"
  mmdebstrap --quiet "${args[@]}" bookworm "${tar}" "${mirror}"
  podman import --quiet "${tar}" "docker.io/library/debian:${tag_name}" >/dev/null
  rm -f "${tar}"
}
# shellcheck disable=SC2016  # $1 is mmdebstrap's: the tree the hook customises
docker_clean_hook='cat > "$1"/etc/apt/apt.conf.d/docker-clean <<EOF
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
rm -rf "$1"/var/lib/apt/lists/*'
for base in 12:0 12-slim:1; do
  name="docker.io/library/debian:${base%%:*}"
  if podman image exists "${name}"; then continue; fi
  if timeout 60 podman pull --quiet "${name}" >/dev/null 2>&1; then
    say "pulled ${name}"
  else
    make_base "${base%%:*}" "${base##*:}"
  fi
done

build_args=(--build-arg VARIANT="${variant}" --build-arg JOBS="${jobs}")
if [[ "${variant}" == cuda ]]; then
  # NVIDIA's images of the Dockerfile's CUDA_VERSION, else this machine's toolkit on Debian 12.
  cuda_version=$(sed -n 's/^ARG CUDA_VERSION=//p' "${repo}/Dockerfile")
  nvidia_build="docker.io/nvidia/cuda:${cuda_version}-cudnn-devel-ubuntu24.04"
  nvidia_runtime="docker.io/nvidia/cuda:${cuda_version}-cudnn-runtime-ubuntu24.04"
  if { podman image exists "${nvidia_build}" \
       || timeout 120 podman pull --quiet "${nvidia_build}" >/dev/null 2>&1; } &&
     { podman image exists "${nvidia_runtime}" \
       || timeout 120 podman pull --quiet "${nvidia_runtime}" >/dev/null 2>&1; }; then
    say "CUDA bases: NVIDIA's ${nvidia_build} and ${nvidia_runtime}"
  else
    cuda_home="$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")"
    for need in bin/nvcc include/cudnn.h include/nccl.h; do
      if [[ ! -e "${cuda_home}/${need}" ]]; then
        echo "build-images.sh: NVIDIA's CUDA images cannot be pulled, and ${cuda_home} has no" \
             "${need}; set CUDA_HOME to a CUDA toolkit with cuDNN and NCCL in it" >&2
        exit 1
      fi
    done
    local_version=$("${cuda_home}/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
    toolkit="localhost/forecastd-cuda-toolkit:${local_version}-debian12"
    if podman image exists "${toolkit}"; then
      say "CUDA bases: ${nvidia_build} cannot be pulled; using ${toolkit} (made earlier)" \
          "and debian:12-slim"
    else
      say "CUDA bases: ${nvidia_build} cannot be pulled; making ${toolkit} from debian:12" \
          "and ${cuda_home} (CUDA ${local_version}, with its cuDNN and NCCL)"
      ctr=$(buildah from --quiet docker.io/library/debian:12)
      trap 'buildah rm "${ctr}" >/dev/null 2>&1 || true' EXIT
      buildah copy --quiet "${ctr}" "${cuda_home}" "/usr/local/cuda-${local_version}" >/dev/null
      # The loader finds the toolkit's libraries as on NVIDIA's images (ldd in the build stage
      # too, which works out what the runtime image needs).
      buildah run --isolation chroot "${ctr}" -- sh -c \
        "ln -s cuda-${local_version} /usr/local/cuda && echo /usr/local/cuda/lib64 \
         > /etc/ld.so.conf.d/000-cuda.conf && ldconfig"
      buildah config --env PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env CUDA_HOME=/usr/local/cuda \
        --label "io.forecastd.cuda-toolkit=${local_version} from ${cuda_home}" "${ctr}"
      buildah commit --quiet "${ctr}" "${toolkit}" >/dev/null
      buildah rm "${ctr}" >/dev/null
      trap - EXIT
    fi
    build_args+=(--build-arg CUDA_BUILD_IMAGE="${toolkit}"
                 --build-arg CUDA_RUNTIME_IMAGE=docker.io/library/debian:12-slim)
  fi
fi

say "building ${tag} with buildah (--isolation chroot), ${jobs} jobs"
# --format docker keeps the Dockerfile's HEALTHCHECK, which the OCI image format has no field for.
buildah bud --isolation chroot --layers --format docker "${build_args[@]}" \
  -t "${tag}" -f "${repo}/Dockerfile" "${repo}"
podman image ls --format 'build-images: {{.Repository}}:{{.Tag}} {{.Size}}' "${tag}"
