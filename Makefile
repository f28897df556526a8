# The quick start: `make run` serves the bundled models on the CPU, `make test` runs every
# test. Both install their dependencies first. Everything else is CMake's job.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
GRPC_ADDRESS ?= 127.0.0.1:8001
HTTP_ADDRESS ?= 127.0.0.1:8000
METRICS_ADDRESS ?= 127.0.0.1:8002
CTEST_FLAGS ?= --output-on-failure

.PHONY: run test deps build format lint clean fuzz sanitize images images-test images-cuda \
	images-cuda-test

# Installs and builds only what it runs: the daemon, the CLI and the health probe (not the
# tests, nor their packages).
run:
	scripts/install-deps.sh --build-only
	BUILD_DIR='$(BUILD_DIR)' BUILD_TYPE='$(BUILD_TYPE)' JOBS='$(JOBS)' CMAKE_FLAGS='$(CMAKE_FLAGS)' \
	  TARGETS='forecastd forecastctl forecastd-health' bash scripts/build.sh
	$(BUILD_DIR)/server/forecastd --model-repository models --devices cpu \
	  --grpc-address $(GRPC_ADDRESS) --http-address '$(HTTP_ADDRESS)' \
	  --metrics-address $(METRICS_ADDRESS)

# Everything but the tests labelled `slow`.
test: deps build
	cd $(BUILD_DIR) && ctest -LE slow -j $(JOBS) $(CTEST_FLAGS)

deps:
	scripts/install-deps.sh

# Configure and build: scripts/build.sh, the same command the Dockerfile runs.
build:
	BUILD_DIR='$(BUILD_DIR)' BUILD_TYPE='$(BUILD_TYPE)' JOBS='$(JOBS)' CMAKE_FLAGS='$(CMAKE_FLAGS)' \
	  bash scripts/build.sh

# Robustness checks, outside `make test` (and CI): each builds in a directory of its own.
# `make fuzz`: the libFuzzer targets of tests/fuzz (clang), FUZZ_SECONDS each from the committed
# seed corpus (scripts/fuzz.sh). `make sanitize`: the unit and integration tests built with
# ASan+UBSan (build-asan) and with TSan (build-tsan) (scripts/sanitize.sh).
FUZZ_SECONDS ?= 60

fuzz: deps
	FUZZ_SECONDS='$(FUZZ_SECONDS)' JOBS='$(JOBS)' bash scripts/fuzz.sh

sanitize: deps
	JOBS='$(JOBS)' bash scripts/sanitize.sh

# The CPU container image from the Dockerfile (Docker, else buildah; base images made with
# mmdebstrap where they cannot be pulled): scripts/container/build-images.sh. images-cuda: the
# CUDA image (on NVIDIA's bases, else on Debian 12 with this machine's CUDA toolkit).
images:
	JOBS='$(JOBS)' bash scripts/container/build-images.sh

images-cuda:
	JOBS='$(JOBS)' bash scripts/container/build-images.sh --variant cuda

# The built image run with podman (tests/deploy/image_test.py, label slow); the CUDA image's
# checks are the same, on the CPU.
images-test: deps build images
	cd $(BUILD_DIR) && ctest -R '^deploy_image_test$$' $(CTEST_FLAGS)

images-cuda-test: deps build images-cuda
	cd $(BUILD_DIR) && ctest -R '^deploy_image_cuda_test$$' $(CTEST_FLAGS)

FORMATTED = $(shell git ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.proto')

format:
	clang-format -i $(FORMATTED)

lint:
	clang-format --dry-run --Werror $(FORMATTED)

clean:
	rm -rf $(BUILD_DIR)
