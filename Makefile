# The quick start: `make run` serves the bundled models on the CPU, `make test` runs every
# test. Both install their dependencies first. Everything else is CMake's job.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
GRPC_ADDRESS ?= 127.0.0.1:8001
METRICS_ADDRESS ?= 127.0.0.1:8002
CTEST_FLAGS ?= --output-on-failure

.PHONY: run test deps build format lint clean

run: deps build
	$(BUILD_DIR)/server/forecastd --model-repository models --devices cpu \
	  --grpc-address $(GRPC_ADDRESS) --metrics-address $(METRICS_ADDRESS)

# Everything but the tests labelled `slow`.
test: deps build
	cd $(BUILD_DIR) && ctest -LE slow -j $(JOBS) $(CTEST_FLAGS)

deps:
	scripts/install-deps.sh

# Configure and build: scripts/build.sh, the same command the Dockerfile runs.
build:
	BUILD_DIR='$(BUILD_DIR)' BUILD_TYPE='$(BUILD_TYPE)' JOBS='$(JOBS)' CMAKE_FLAGS='$(CMAKE_FLAGS)' \
	  bash scripts/build.sh

FORMATTED = $(shell git ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.proto')

format:
	clang-format -i $(FORMATTED)

lint:
	clang-format --dry-run --Werror $(FORMATTED)

clean:
	rm -rf $(BUILD_DIR)
