#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

std::string Quoted(absl::string_view name) {
  return absl::StrCat("shared-memory region '", name, "'");
}

// Moves `owner`'s entry `name` of `regions` (every entry of `owner` for an empty name) into
// `released`, for the caller to destroy after its lock; NOT_FOUND when `owner` has no such
// entry. `regions` is keyed by (owner, name).
template <typename Map>
absl::Status EraseOwned(Map& regions, const std::string& owner, const std::string& name,
                        std::vector<typename Map::mapped_type>& released) {
  if (name.empty()) {
    for (auto it = regions.lower_bound({owner, ""});
         it != regions.end() && it->first.first == owner;) {
      released.push_back(std::move(it->second));
      it = regions.erase(it);
    }
    return absl::OkStatus();
  }
  const auto it = regions.find({owner, name});
  if (it == regions.end()) {
    return absl::NotFoundError(absl::StrCat(Quoted(name), " is not registered"));
  }
  released.push_back(std::move(it->second));
  regions.erase(it);
  return absl::OkStatus();
}

// describe(entry) of `owner`'s entry `name` of `regions`, or of every entry of `owner` (sorted
// by name) for an empty name; NOT_FOUND when `owner` has no such entry.
template <typename Map, typename Describe>
auto DescribeOwned(const Map& regions, const std::string& owner, const std::string& name,
                   Describe describe)
    -> absl::StatusOr<std::vector<decltype(describe(*regions.begin()))>> {
  std::vector<decltype(describe(*regions.begin()))> out;
  if (name.empty()) {
    for (auto it = regions.lower_bound({owner, ""});
         it != regions.end() && it->first.first == owner; ++it) {
      out.push_back(describe(*it));
    }
    return out;
  }
  const auto it = regions.find({owner, name});
  if (it == regions.end()) {
    return absl::NotFoundError(absl::StrCat(Quoted(name), " is not registered"));
  }
  out.push_back(describe(*it));
  return out;
}

}  // namespace

SharedMemoryRegion::~SharedMemoryRegion() { munmap(mapping_, mapping_bytes_); }

absl::Status CheckInsideRegion(absl::string_view what, absl::string_view name, int64_t offset,
                               int64_t byte_size, int64_t region_bytes) {
  if (offset < 0 || byte_size <= 0 || offset > region_bytes || byte_size > region_bytes - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", byte_size, " bytes at offset ",
                                                   offset, " do not lie inside the ", Quoted(name),
                                                   " of ", region_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<char*> SharedMemoryRegion::Slice(absl::string_view what, int64_t offset,
                                                int64_t byte_size) const {
  RETURN_IF_ERROR(CheckInsideRegion(what, name_, offset, byte_size, byte_size_));
  return data_ + offset;
}

absl::Status SharedMemoryRegistry::Register(const std::string& owner, const std::string& name,
                                            const std::string& key, int64_t offset,
                                            int64_t byte_size) {
  if (name.empty()) return absl::InvalidArgumentError("a shared-memory region needs a name");
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted(name), " needs the key of a POSIX shared-memory object"));
  }
  if (byte_size <= 0 || offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(Quoted(name), ": byte_size (", byte_size,
                                                   ") must be positive and offset (", offset,
                                                   ") not negative"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (NameTakenLocked(Key(owner, name))) {
      return absl::AlreadyExistsError(absl::StrCat(Quoted(name), " is already registered"));
    }
  }
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrCat(Quoted(name), ": cannot open the shared-memory key '",
                                             key, "': ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::InvalidArgumentError(message);
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat(Quoted(name), ": fstat of '", key, "' failed: ", std::strerror(error)));
  }
  const int64_t object_bytes = static_cast<int64_t>(info.st_size);
  if (offset > object_bytes || byte_size > object_bytes - offset) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        Quoted(name), ": ", byte_size, " bytes at offset ", offset,
        " do not fit the shared-memory object '", key, "' of ", object_bytes, " bytes"));
  }
  // mmap's offset must be a multiple of the page size: map from the page the region starts in.
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t map_offset = offset - offset % page;
  const size_t map_bytes = static_cast<size_t>(byte_size + (offset - map_offset));
  void* mapping = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       static_cast<off_t>(map_offset));
  const int map_error = errno;
  close(fd);  // the mapping keeps the object
  if (mapping == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted(name), ": cannot map '", key, "': ", std::strerror(map_error)));
  }
  std::shared_ptr<const SharedMemoryRegion> region(
      new SharedMemoryRegion(name, key, offset, byte_size, mapping, map_bytes,
                             static_cast<char*>(mapping) + (offset - map_offset)));
  absl::MutexLock lock(&mu_);
  // A concurrent Register of the same name may have won; the loser's mapping goes with it.
  if (NameTakenLocked(Key(owner, name)) ||
      !regions_.emplace(Key(owner, name), std::move(region)).second) {
    return absl::AlreadyExistsError(absl::StrCat(Quoted(name), " is already registered"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& owner, const std::string& name) {
  // Mappings are released after the lock: an unmap need not hold up other callers.
  std::vector<std::shared_ptr<const SharedMemoryRegion>> released;
  absl::MutexLock lock(&mu_);
  return EraseOwned(regions_, owner, name, released);
}

absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> SharedMemoryRegistry::Status(
    const std::string& owner, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  return DescribeOwned(regions_, owner, name, [](const auto& entry) {
    const SharedMemoryRegion& region = *entry.second;
    return RegionStatus{.name = region.name(),
                        .key = region.key(),
                        .offset = region.offset(),
                        .byte_size = region.byte_size()};
  });
}

absl::Status SharedMemoryRegistry::RegisterCuda(const std::string& owner, const std::string& name,
                                                const std::string& raw_handle, int device_id,
                                                int64_t byte_size) {
  if (name.empty()) return absl::InvalidArgumentError("a shared-memory region needs a name");
  {
    absl::MutexLock lock(&mu_);
    if (NameTakenLocked(Key(owner, name))) {
      return absl::AlreadyExistsError(absl::StrCat(Quoted(name), " is already registered"));
    }
  }
  absl::StatusOr<std::unique_ptr<DeviceMemoryRegion>> opened =
      OpenCudaIpcMemory(raw_handle, device_id, byte_size);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat(Quoted(name), ": ", opened.status().message()));
  }
  CudaEntry entry{.region = *std::move(opened), .device_id = device_id};
  absl::MutexLock lock(&mu_);
  // A concurrent Register of the same name may have won; the loser's handle closes with it.
  if (NameTakenLocked(Key(owner, name))) {
    return absl::AlreadyExistsError(absl::StrCat(Quoted(name), " is already registered"));
  }
  cuda_regions_.emplace(Key(owner, name), std::move(entry));
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::UnregisterCuda(const std::string& owner,
                                                  const std::string& name) {
  std::vector<CudaEntry> released;  // closed after the lock
  absl::MutexLock lock(&mu_);
  return EraseOwned(cuda_regions_, owner, name, released);
}

absl::StatusOr<std::vector<SharedMemoryRegistry::CudaRegionStatus>>
SharedMemoryRegistry::CudaStatus(const std::string& owner, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  return DescribeOwned(cuda_regions_, owner, name, [](const auto& entry) {
    return CudaRegionStatus{.name = entry.first.second,
                            .device_id = entry.second.device_id,
                            .byte_size = entry.second.region->byte_size()};
  });
}

absl::StatusOr<SharedMemoryRegistry::Acquired> SharedMemoryRegistry::AcquireAny(
    const std::string& owner, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  Acquired acquired;
  if (const auto it = regions_.find(Key(owner, name)); it != regions_.end()) {
    acquired.system = it->second;
    return acquired;
  }
  if (const auto it = cuda_regions_.find(Key(owner, name)); it != cuda_regions_.end()) {
    acquired.cuda = it->second.region;
    return acquired;
  }
  return absl::NotFoundError(
      absl::StrCat(Quoted(name),
                   " is not registered (register it with SystemSharedMemoryRegister or "
                   "CudaSharedMemoryRegister first)"));
}

absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> SharedMemoryRegistry::Acquire(
    const std::string& owner, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  const auto it = regions_.find(Key(owner, name));
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat(
        Quoted(name), " is not registered (register it with SystemSharedMemoryRegister first)"));
  }
  return it->second;
}

size_t SharedMemoryRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return regions_.size() + cuda_regions_.size();
}

}  // namespace forecastd
