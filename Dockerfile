# forecastd's container image: two variants from this one file.
#
#   docker build -t forecastd:cuda .                          CUDA 13, cuDNN 9, NCCL (the default)
#   docker build --build-arg VARIANT=cpu -t forecastd:cpu .    CPU only (oneDNN), Debian 12 slim
#
#   docker run --rm --gpus all --stop-timeout 45 -p 8001:8001 -p 8002:8002 forecastd:cuda
#
# Both variants build forecastd exactly as `make build` and CI do: scripts/install-deps.sh, then
# scripts/build.sh (here with -DBUILD_TESTING=OFF). Needs BuildKit, the default builder since
# Docker 23. Build arguments: VARIANT (cuda|cpu), CUDA_VERSION / CUDA_SERIES (the NVIDIA image to
# take the CUDA SDK from), CUDA_ARCHITECTURES (FORECASTD_CUDA_ARCHITECTURES, default
# "90-real;90-virtual"), JOBS (build parallelism, default: every core).
#
# Why the CUDA variant builds on Debian 12 and not on the Ubuntu 24.04 CUDA image itself:
# forecastd is written against oneDNN's 2.x API (Debian 12 ships 2.6), which oneDNN 3.0 removed,
# and Ubuntu 24.04 ships oneDNN 3.1. So the CUDA toolkit, cuDNN and NCCL are taken from NVIDIA's
# official cudnn-devel image (the cuda-sdk stage) into a Debian 12 build stage, the same layout
# as the project's own CUDA build machines, and the runtime image carries the CUDA, cuDNN and
# NCCL libraries forecastd loads on top of Debian 12 slim (the NVIDIA container toolkit mounts
# the driver, as it does for NVIDIA's runtime images, by the NVIDIA_* variables below).
#
# Docker stops a container 10 s after SIGTERM unless told otherwise; forecastd may need
# --drain-timeout (30 s) + --shutdown-grace-seconds (10 s) to drain, hence --stop-timeout 45.

ARG VARIANT=cuda
ARG CUDA_VERSION=13.0.1
ARG CUDA_SERIES=13.0

# ---- CUDA SDK: NVIDIA's toolkit with cuDNN and NCCL gathered into /usr/local/cuda-<series>.
FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu24.04 AS cuda-sdk
COPY deploy/docker/gather-cuda-sdk.sh /usr/local/bin/gather-cuda-sdk.sh
RUN bash /usr/local/bin/gather-cuda-sdk.sh

# ---- Build stages: one base per variant, then the common build.
FROM debian:12 AS build-cpu
ENV FORECASTD_CMAKE_FLAGS="-DFORECASTD_CUDA=OFF"

FROM debian:12 AS build-cuda
ARG CUDA_SERIES
COPY --from=cuda-sdk /usr/local/cuda-${CUDA_SERIES} /usr/local/cuda-${CUDA_SERIES}
RUN ln -s cuda-${CUDA_SERIES} /usr/local/cuda \
 && echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf \
 && ldconfig
ENV PATH=/usr/local/cuda/bin:${PATH} \
    FORECASTD_CMAKE_FLAGS="-DFORECASTD_CUDA=ON"

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

FROM debian:12-slim AS runtime-cuda
# The NVIDIA container toolkit reads these to expose the GPUs and mount the driver's libraries
# (libcuda, libnvidia-ml) into the container.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0"

FROM runtime-${VARIANT} AS runtime
ARG VARIANT
# The packages owning the libraries forecastd links (the build stage's ldd + dpkg; same release),
# and a non-root user whose numeric id Kubernetes' runAsNonRoot can check.
COPY --from=build /opt/runtime/packages.txt /tmp/forecastd-packages.txt
RUN apt-get update \
 && xargs -r -a /tmp/forecastd-packages.txt \
      env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/forecastd-packages.txt \
 && groupadd --system --gid 10001 forecastd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /models --no-create-home \
      --shell /usr/sbin/nologin forecastd
# Libraries no package owns (CUDA, cuDNN, NCCL; empty for the CPU variant).
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
# gRPC (forecastd.v1, KServe v2, grpc.health.v1) and Prometheus metrics at /metrics.
EXPOSE 8001 8002
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["forecastd-health", "--address=127.0.0.1:8001", "--timeout-ms=3000"]
ENTRYPOINT ["forecastd"]
CMD ["--model-repository=/models", "--data-dir=/data", \
     "--grpc-address=0.0.0.0:8001", "--metrics-address=0.0.0.0:8002", \
     "--devices=all", "--drain-timeout=30", "--shutdown-grace-seconds=10", \
     "--log-format=json"]
