// Windows and forecasts that live in a GPU's memory rather than in host memory: a client's
// CUDA shared-memory region (backends/device_memory.h), which a request names in place of its
// tensors' data. A PredictTask points at part of one (DeviceSpan); a batch tells its instance
// which of its rows are there (DeviceRowsIo). An instance on a GPU copies those rows between
// the region and its own device buffers without crossing host memory; any other instance gets
// them through host memory (DeviceMemoryRegion's copies). Thread-safety: values.
#ifndef FORECASTD_ENGINE_SERVING_DEVICE_MEMORY_H_
#define FORECASTD_ENGINE_SERVING_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/device_memory.h"

namespace forecastd {

// Bytes of a region that hold a task's windows or receive its forecasts. The reference keeps
// the region open while the task uses it. No region: the task's host memory is used.
struct DeviceSpan {
  std::shared_ptr<const DeviceMemoryRegion> region;
  int64_t offset = 0;
  int64_t bytes = 0;

  bool empty() const { return region == nullptr; }
  char* data() const { return region->data() + offset; }
};

// A run of a batch's rows whose windows are read from device memory or whose forecasts are
// written to it, in place of the host staging buffers.
struct DeviceRows {
  int64_t first_row = 0;  // in the batch
  int64_t rows = 0;
  // (rows, T * F) float32 windows in device memory; nullptr: they are in the host input.
  const float* input = nullptr;
  // (rows, num_outputs) float32 forecasts to write in device memory; nullptr: the host output
  // only.
  float* output = nullptr;
};

// What a batch with rows in device memory asks of the instance that computes it.
struct DeviceRowsIo {
  // Runs in ascending first_row order, not overlapping.
  std::vector<DeviceRows> runs;
  // When non-null, (batch rows) flags the instance sets for the batch's rows: 1 where the row's
  // window holds a NaN or an infinity, else 0 (the host never sees the windows read from device
  // memory to check them).
  uint8_t* non_finite_rows = nullptr;

  bool empty() const { return runs.empty(); }
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_DEVICE_MEMORY_H_
