#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace forecastd {
namespace {

std::string Quoted(absl::string_view name) {
  return absl::StrCat("shared-memory region '", name, "'");
}

}  // namespace

SharedMemoryRegion::~SharedMemoryRegion() { munmap(mapping_, mapping_bytes_); }

absl::StatusOr<char*> SharedMemoryRegion::Slice(absl::string_view what, int64_t offset,
                                                int64_t byte_size) const {
  if (offset < 0 || byte_size <= 0 || offset > byte_size_ || byte_size > byte_size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", byte_size, " bytes at offset ",
                                                   offset, " do not lie inside the ", Quoted(name_),
                                                   " of ", byte_size_, " bytes"));
  }
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
    if (regions_.contains({owner, name})) {
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
  if (!regions_.emplace(Key(owner, name), std::move(region)).second) {
    return absl::AlreadyExistsError(absl::StrCat(Quoted(name), " is already registered"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& owner, const std::string& name) {
  // Mappings are released after the lock: an unmap need not hold up other callers.
  std::vector<std::shared_ptr<const SharedMemoryRegion>> released;
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (auto it = regions_.lower_bound(Key(owner, ""));
         it != regions_.end() && it->first.first == owner;) {
      released.push_back(std::move(it->second));
      it = regions_.erase(it);
    }
    return absl::OkStatus();
  }
  const auto it = regions_.find(Key(owner, name));
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat(Quoted(name), " is not registered"));
  }
  released.push_back(std::move(it->second));
  regions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> SharedMemoryRegistry::Status(
    const std::string& owner, const std::string& name) const {
  std::vector<RegionStatus> out;
  const auto describe = [](const SharedMemoryRegion& region) {
    return RegionStatus{.name = region.name(),
                        .key = region.key(),
                        .offset = region.offset(),
                        .byte_size = region.byte_size()};
  };
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (auto it = regions_.lower_bound(Key(owner, ""));
         it != regions_.end() && it->first.first == owner; ++it) {
      out.push_back(describe(*it->second));
    }
    return out;
  }
  const auto it = regions_.find(Key(owner, name));
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat(Quoted(name), " is not registered"));
  }
  out.push_back(describe(*it->second));
  return out;
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
  return regions_.size();
}

}  // namespace forecastd
