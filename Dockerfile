# forecastd's container image: two variants from this one file.
#
#   docker build -t forecastd:cuda .                          CUDA 13, cuDNN 9, NCCL (the default)
#   docker build --build-arg VARIANT=cpu -t forecastd:cpu .    CPU only (oneDNN)
#
#   docker run --rm --gpus all --stop-timeout 45 -p 8000:8000 -p 8001:8001 -p 8002:8002 forecastd:cuda
#
# Both variants build forecastd exactly as `make build` and CI do: scripts/install-deps.sh, then
# scripts/build.sh (here with -DBUILD_TESTING=OFF). Needs BuildKit, the default builder since
# Docker 23. Build arguments: VARIANT (cuda|cpu), CUDA_VERSION (the tag of NVIDIA's images),
# CUDA_BUILD_IMAGE and CUDA_RUNTIME_IMAGE (the cuda variant's two bases; default NVIDIA's images
# of CUDA_VERSION, below), CUDA_ARCHITECTURES (FORECASTD_CUDA_ARCHITECTURES, default
# "90-real;90-virtual"), JOBS (build parallelism, default: every core).
#
# Each variant builds and runs on one distribution release, so that the runtime stage can
# apt-install the very packages whose libraries the build linked (deploy/docker/stage-runtime.sh
# lists them, whatever their per-release names):
#   cpu   debian:12 -> debian:12-slim, with Debian's oneDNN 2.6.
#   cuda  nvidia/cuda:<CUDA_VERSION>-cudnn-devel-ubuntu24.04 -> ...-cudnn-runtime-ubuntu24.04,
#         NVIDIA's official images, with Ubuntu's oneDNN 3.1 (backends/cpu/dnnl_compat.h builds
#         forecastd against oneDNN 2 and 3 alike). The toolkit, cuDNN and NCCL are NVIDIA's
#         packages in both images; the NVIDIA container toolkit mounts the driver, as the
#         NVIDIA_* variables of the runtime stage ask.
#   cuda, other bases: any pair of one release works, e.g. debian:12 with a CUDA toolkit
#         (nvcc, cuDNN and NCCL in it) unpacked under /usr/local/cuda -> debian:12-slim, as
#         scripts/container/build-images.sh --variant cuda makes where NVIDIA's images cannot
#         be pulled. A library no package owns (the toolkit's, there) is copied from the build
#         into the image by deploy/docker/stage-runtime.sh.
#
# Docker stops a container 10 s after SIGTERM unless told otherwise; forecastd may need
# --drain-timeout (30 s) + --shutdown-grace-seconds (10 s) to drain, hence --stop-timeout 45.

ARG VARIANT=cuda
ARG CUDA_VERSION=13.0.1
ARG CUDA_BUILD_IMAGE=nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu24.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-ubuntu24.04

# ---- Build stages: one base per variant, then the common build.
FROM debian:12 AS build-cpu
ENV FORECASTD_CMAKE_FLAGS="-DFORECASTD_CUDA=OFF"

# nvcc is /usr/local/cuda/bin/nvcc; cuDNN's and NCCL's headers and libraries are in /usr/include
# and /usr/lib/<triplet> (NVIDIA's images) or in the toolkit's include/ and lib/, where
# scripts/cmake/ForecastdCuda.cmake looks.
FROM ${CUDA_BUILD_IMAGE} AS build-cuda
ENV FORECASTD_CMAKE_FLAGS="-DFORECASTD_CUDA=ON"

FROM build-${VARIANT} AS build
ARG CUDA_ARCHITECTURES=""
ARG JOBS=""
WORKDIR /src
# Dependencies first, so that editing the sources does not reinstall them.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
ENV CCACHE_DIR=/ccache
RUN --mount=type=cache,target=/ccache \
    arch_flag=""; \
    if [ -n "$CUDA_ARCHITECTURES" ]; then \
      arch_flag="-DFORECASTD_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"; \
    fi; \
    BUILD_DIR=/build BUILD_TYPE=Release JOBS="${JOBS:-$(nproc)}" \
    CMAKE_FLAGS="$FORECASTD_CMAKE_FLAGS -DBUILD_TESTING=OFF $arch_flag" \
    INSTALL_PREFIX=/opt/forecastd bash scripts/build.sh \
 && bash deploy/docker/stage-runtime.sh /opt/runtime /opt/forecastd/bin/*

# ---- Runtime stages: one base per variant, then the common image.
FROM debian:12-slim AS runtime-cpu

# NVIDIA's runtime image of the build's tag: the CUDA runtime, cuBLAS and cuDNN forecastd loads,
# at the build's versions (held by NVIDIA), and NCCL's runtime package, libnccl2 (the stage
# below installs it from NVIDIA's repository, which the image configures, should a tag lack it).
# On another base the build stage's unpackaged libraries come along instead (below). Either way
# the NVIDIA container toolkit is asked for every GPU and for compute and NVML.
FROM ${CUDA_RUNTIME_IMAGE} AS runtime-cuda
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility

FROM runtime-${VARIANT} AS runtime
ARG VARIANT
# The packages owning the libraries forecastd links (the build stage's ldd + dpkg; same release:
# grpc++, protobuf, abseil, spdlog, fmt, prometheus-cpp, oneDNN, OpenMP, and for CUDA NVIDIA's
# cudart, cuBLAS, cuDNN and NCCL), those the base image lacks, so that NVIDIA's held packages
# are left as they are; and a non-root user whose numeric id Kubernetes' runAsNonRoot can check.
COPY --from=build /opt/runtime/packages.txt /tmp/forecastd-packages.txt
RUN apt-get update \
 && missing=$(while read -r pkg; do \
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
        || echo "$pkg"; \
    done < /tmp/forecastd-packages.txt) \
 && echo "forecastd runtime: installing ${missing:-nothing}" \
 && if [ -n "$missing" ]; then \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; \
    fi \
 && rm -rf /var/lib/apt/lists/* /tmp/forecastd-packages.txt \
 && groupadd --system --gid 10001 forecastd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /models --no-create-home \
      --shell /usr/sbin/nologin forecastd
# Libraries no package owns (none for the CPU variant or on NVIDIA's images; the toolkit's
# CUDA runtime, cuBLAS, cuDNN and NCCL on a base where it was unpacked by hand).
COPY --from=build /opt/runtime/lib/ /opt/forecastd/lib/
RUN echo /opt/forecastd/lib > /etc/ld.so.conf.d/forecastd.conf && ldconfig
# forecastd, forecastd-health and whatever else the build installs (forecastctl).
COPY --from=build /opt/forecastd/bin/ /usr/local/bin/
# The bundled demo models seed the repository volume; training writes new versions into it.
COPY --chown=10001:10001 models/ /models/
RUN mkdir -p /data && chown 10001:10001 /data

LABEL org.opencontainers.image.title="forecastd" \
      org.opencontainers.image.description="Serves and trains time-series forecasting models over gRPC" \
      io.forecastd.variant="${VARIANT}"

USER 10001:10001
WORKDIR /models
VOLUME ["/models"]
# KServe v2 REST, gRPC (forecastd.v1, KServe v2, grpc.health.v1) and Prometheus metrics at
# /metrics.
EXPOSE 8000 8001 8002
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["forecastd-health", "--address=127.0.0.1:8001", "--timeout-ms=3000"]
ENTRYPOINT ["forecastd"]
CMD ["--model-repository=/models", "--data-dir=/data", \
     "--grpc-address=0.0.0.0:8001", "--http-address=0.0.0.0:8000", \
     "--metrics-address=0.0.0.0:8002", \
     "--devices=all", "--drain-timeout=30", "--shutdown-grace-seconds=10", \
     "--log-format=json"]
