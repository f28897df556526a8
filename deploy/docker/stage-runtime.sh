#!/usr/bin/env bash
# Runs at the end of the Dockerfile's build stage: works out what the runtime image needs for
# the given executables, from the shared libraries they load (as ldd resolves them):
#   OUT/packages.txt  the distribution packages owning those libraries, one per line, which the
#                     runtime stage (same distribution and release) apt-installs, whatever their
#                     per-release names (libgrpc++1.51, libprotobuf32, libdnnl2, ...)
#   OUT/lib/          the libraries no package owns (on a toolkit installed outside the package
#                     manager), copied under their sonames; with libcudnn.so.N come the cuDNN
#                     sub-libraries and NVRTC, which cuDNN dlopens. In NVIDIA's images the
#                     toolkit, cuDNN and NCCL are packages, so they land in packages.txt.
# The driver's libraries (libcuda.so.1, libnvidia-ml.so.1), which the NVIDIA container toolkit
# mounts from the host at run time, may be missing here; any other missing library is an error.
# Usage: stage-runtime.sh OUT EXECUTABLE...   (STAGE_RUNTIME_LINK_ONLY=1: link, do not copy)
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT EXECUTABLE..." >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out/lib"

copy_lib() {  # copies library $1 (dereferenced) into OUT/lib under its SONAME
  local soname
  soname=$(readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  soname=${soname:-$(basename "$1")}
  [[ -e "$out/lib/$soname" ]] && return 0
  if [[ -n ${STAGE_RUNTIME_LINK_ONLY:-} ]]; then  # the deploy test: no gigabytes copied
    ln -s "$(readlink -f "$1")" "$out/lib/$soname"
  else
    cp -L "$1" "$out/lib/$soname"
  fi
}

candidates() {  # the paths dpkg may know a library by: as given, resolved, and without /usr
  local resolved
  resolved=$(readlink -f "$1")
  printf '%s\n' "$1" "$resolved" "${resolved#/usr}"
}

status=0
declare -A needed=()  # library path -> its name as the executable asks for it
for exe in "$@"; do
  while read -r line; do
    # "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" or "libbar.so.2 => not found"
    [[ $line == *"=>"* ]] || continue
    name=${line%% *}
    target=${line#*=> }
    target=${target%% (*}
    if [[ $target == "not found" ]]; then
      case "$name" in
        libcuda.so.* | libnvidia-ml.so.*) ;;
        *) echo "stage-runtime: $exe needs $name, which is not found" >&2; status=1 ;;
      esac
      continue
    fi
    needed[$target]=$name
  done < <(ldd "$exe")
done

# One dpkg-query for every candidate path (one per library is slow): "pkg:arch[, ...]: path".
declare -A owner_of=()
mapfile -t paths < <(for target in "${!needed[@]}"; do candidates "$target"; done | sort -u)
while IFS= read -r line; do
  [[ $line == diversion* ]] && continue
  pkg=${line%%: /*}
  pkg=${pkg%%,*}
  owner_of[${line#*: }]=${pkg%%:*}
done < <(dpkg-query -S "${paths[@]}" 2>/dev/null || true)

declare -A packages=()
for target in "${!needed[@]}"; do
  pkg=""
  while read -r candidate; do
    if [[ -n ${owner_of[$candidate]:-} ]]; then
      pkg=${owner_of[$candidate]}
      break
    fi
  done < <(candidates "$target")
  if [[ -n $pkg ]]; then
    packages[$pkg]=1
    continue
  fi
  copy_lib "$target"
  if [[ ${needed[$target]} == libcudnn.so.* ]]; then
    dir=$(dirname "$(readlink -f "$target")")
    shopt -s nullglob
    for extra in "$dir"/libcudnn_*.so* "$dir"/libnvrtc.so* "$dir"/libnvrtc-builtins.so*; do
      copy_lib "$extra"
    done
    shopt -u nullglob
  fi
done
[[ $status -eq 0 ]] || exit "$status"
printf '%s\n' "${!packages[@]}" | sort > "$out/packages.txt"
echo "stage-runtime: $(wc -l < "$out/packages.txt") packages, $(ls "$out/lib" | wc -l) unpackaged libraries"
