// System shared memory as Triton's extension defines it: a client creates a POSIX shared-memory
// object (shm_open of a key), registers part of it under a name, and then names that region,
// an offset and a byte size in place of an input's data or an output's contents. The registry
// maps each registered region (shm_open(key, O_RDWR) + mmap of offset .. offset + byte_size,
// checked against the object's size) and hands out references to the mapping; a mapping is
// unmapped when its region is unregistered (or the registry destroyed) and no request still
// holds it, so an unregister never pulls memory from under a request in flight.
// CUDA shared memory, Triton's other extension, registers a CUDA IPC handle of a client's
// device allocation instead (RegisterCuda: opened with OpenCudaIpcMemory, closed when its
// region is unregistered and no request holds it); a batch on a GPU copies such a region's
// windows and forecasts device to device. System and CUDA regions share one namespace per
// owner, as in Triton: a name is registered once, of one kind.
// Regions belong to an owner (the caller's token identity; "" without tokens): an owner sees,
// uses and unregisters only its own regions, and another owner's region is NOT_FOUND, as if
// absent. Thread-safe: every method may be called concurrently.
#ifndef FORECASTD_SERVER_SHARED_MEMORY_H_
#define FORECASTD_SERVER_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "backends/device_memory.h"

namespace forecastd {

// INVALID_ARGUMENT naming `what` and region `name` unless `byte_size` (positive) bytes at
// `offset` lie inside a region of `region_bytes` bytes.
absl::Status CheckInsideRegion(absl::string_view what, absl::string_view name, int64_t offset,
                               int64_t byte_size, int64_t region_bytes);

// One mapped region. Immutable after creation; its bytes are shared with the client process,
// which may change them at any time. Unmapped by its destructor.
class SharedMemoryRegion {
 public:
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  // The offset into the shared-memory object where the region starts.
  int64_t offset() const { return offset_; }
  int64_t byte_size() const { return byte_size_; }

  // The `byte_size` bytes at `offset` into the region; INVALID_ARGUMENT naming the region when
  // they do not lie inside it or `byte_size` is not positive. `what` starts the message
  // ("input 'INPUT'").
  absl::StatusOr<char*> Slice(absl::string_view what, int64_t offset, int64_t byte_size) const;

 private:
  friend class SharedMemoryRegistry;
  SharedMemoryRegion(std::string name, std::string key, int64_t offset, int64_t byte_size,
                     void* mapping, size_t mapping_bytes, char* data)
      : name_(std::move(name)),
        key_(std::move(key)),
        offset_(offset),
        byte_size_(byte_size),
        mapping_(mapping),
        mapping_bytes_(mapping_bytes),
        data_(data) {}

  const std::string name_;
  const std::string key_;
  const int64_t offset_;
  const int64_t byte_size_;
  // What mmap returned (page-aligned, starting at or before offset) and its length.
  void* const mapping_;
  const size_t mapping_bytes_;
  // The region's first byte.
  char* const data_;
};

class SharedMemoryRegistry {
 public:
  // What SharedMemoryStatus reports of one region.
  struct RegionStatus {
    std::string name;
    std::string key;
    int64_t offset = 0;
    int64_t byte_size = 0;
  };
  // What CudaSharedMemoryStatus reports of one region.
  struct CudaRegionStatus {
    std::string name;
    int device_id = 0;
    int64_t byte_size = 0;
  };
  // A region a request names, of either kind (exactly one is set); the references keep it
  // mapped or open while held.
  struct Acquired {
    std::shared_ptr<const SharedMemoryRegion> system;
    std::shared_ptr<const DeviceMemoryRegion> cuda;
  };

  SharedMemoryRegistry() = default;
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  // Maps `byte_size` bytes at `offset` of the shared-memory object `key` as `owner`'s region
  // `name`. INVALID_ARGUMENT (naming the region) for an empty name or key, a byte size that is
  // not positive, a negative offset, or a range beyond the object's size; NOT_FOUND when no
  // object has that key; ALREADY_EXISTS when `owner` has a region of that name.
  absl::Status Register(const std::string& owner, const std::string& name, const std::string& key,
                        int64_t offset, int64_t byte_size);

  // Forgets `owner`'s region `name` (NOT_FOUND if it has none) or, for an empty name, every
  // region of `owner`. The mapping goes when the last request using it is done.
  absl::Status Unregister(const std::string& owner, const std::string& name);

  // `owner`'s region `name`, or for an empty name all of `owner`'s regions, sorted by name;
  // NOT_FOUND for a name `owner` has not registered.
  absl::StatusOr<std::vector<RegionStatus>> Status(const std::string& owner,
                                                   const std::string& name) const;

  // A reference to `owner`'s system region `name` that keeps it mapped while held; NOT_FOUND
  // naming it when `owner` has no such region.
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> Acquire(const std::string& owner,
                                                                    const std::string& name) const;

  // Opens `raw_handle` (a CUDA IPC handle, kCudaIpcHandleBytes bytes) on GPU `device_id` as
  // `owner`'s region `name` of `byte_size` bytes. OpenCudaIpcMemory's codes (naming the region);
  // INVALID_ARGUMENT for an empty name; ALREADY_EXISTS when `owner` has a region of that name.
  absl::Status RegisterCuda(const std::string& owner, const std::string& name,
                            const std::string& raw_handle, int device_id, int64_t byte_size);
  // Unregister and Status for CUDA regions.
  absl::Status UnregisterCuda(const std::string& owner, const std::string& name);
  absl::StatusOr<std::vector<CudaRegionStatus>> CudaStatus(const std::string& owner,
                                                           const std::string& name) const;

  // `owner`'s region `name` of either kind; NOT_FOUND naming it when there is none.
  absl::StatusOr<Acquired> AcquireAny(const std::string& owner, const std::string& name) const;

  // How many regions are registered, both kinds and all owners together.
  size_t size() const;

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, name)
  struct CudaEntry {
    std::shared_ptr<const DeviceMemoryRegion> region;
    int device_id = 0;
  };

  bool NameTakenLocked(const Key& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return regions_.contains(key) || cuda_regions_.contains(key);
  }

  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<const SharedMemoryRegion>> regions_ ABSL_GUARDED_BY(mu_);
  std::map<Key, CudaEntry> cuda_regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_SHARED_MEMORY_H_
