#!/usr/bin/env bash
# Runs in the Dockerfile's cuda-sdk stage (nvidia/cuda:<version>-cudnn-devel-ubuntu24.04): puts
# cuDNN's and NCCL's headers and libraries, which NVIDIA's .debs install under /usr/include and
# /usr/lib/<triplet> (partly through update-alternatives links), into the CUDA toolkit directory,
# so that /usr/local/cuda-X.Y alone is a complete SDK the Debian 12 build stage can copy: the same
# layout as the project's CUDA build machines (cudnn.h, nccl.h, libcudnn.so, libnccl.so beside
# the toolkit's own). Header names lose a version suffix (cudnn_v9.h -> cudnn.h); library links
# are re-made relative (libcudnn.so -> libcudnn.so.9.x.y); nothing is copied twice.
# ROOT (default /) lets the deploy test run it on a made-up tree.
set -euo pipefail

ROOT=${ROOT:-}
cuda=$(readlink -f "$ROOT/usr/local/cuda")
inc=$cuda/include
lib=$cuda/lib64
[[ -d $inc && -d $lib ]] || { echo "gather-cuda-sdk: no CUDA toolkit at $cuda" >&2; exit 1; }
triplet="$(uname -m)-linux-gnu"

shopt -s nullglob
for dir in "$ROOT/usr/include" "$ROOT/usr/include/$triplet"; do
  for header in "$dir"/cudnn*.h "$dir"/nccl*.h; do
    name=$(basename "$header" | sed -E 's/_v[0-9]+\.h$/.h/')
    [[ -e "$inc/$name" && $(readlink -f "$inc/$name") == $(readlink -f "$header") ]] && continue
    cp -L "$header" "$inc/$name"
  done
  for subdir in "$dir"/nccl*/; do  # NCCL >= 2.28 also ships headers in nccl_device/
    cp -rL "$subdir" "$inc/"
  done
done
for dir in "$ROOT/usr/lib/$triplet" "$ROOT/usr/lib64" "$ROOT/usr/lib"; do
  [[ -d $dir && $(readlink -f "$dir") != $(readlink -f "$lib") ]] || continue
  for file in "$dir"/libcudnn*.so* "$dir"/libnccl*.so*; do
    name=$(basename "$file")
    if [[ -L $file ]]; then
      target=$(readlink -f "$file")
      [[ -e $target ]] || continue
      ln -sfn "$(basename "$target")" "$lib/$name"
    else
      cp "$file" "$lib/$name"
    fi
  done
done

missing=()
for need in "$inc/cudnn.h" "$inc/cudnn_version.h" "$inc/nccl.h" "$lib/libcudnn.so" "$lib/libnccl.so"; do
  [[ -e $need ]] || missing+=("$need")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "gather-cuda-sdk: still missing: ${missing[*]}" >&2
  exit 1
fi
echo "gather-cuda-sdk: cuDNN and NCCL are in $cuda"
