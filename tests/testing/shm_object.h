// A POSIX shared-memory object as a Triton client makes one (shm_open of a key, ftruncate,
// mmap), for the tests of system shared memory; unlinked and unmapped when destroyed.
// Thread-compatible.
#ifndef FORECASTD_TESTS_TESTING_SHM_OBJECT_H_
#define FORECASTD_TESTS_TESTING_SHM_OBJECT_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace forecastd::testing {

class ShmObject {
 public:
  // A fresh object of `bytes` zero bytes under a key unique to this process and object.
  explicit ShmObject(size_t bytes) : bytes_(bytes) {
    static std::atomic<int> next{0};
    key_ = absl::StrCat("/forecastd-test-", getpid(), "-", next.fetch_add(1));
    const int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return;
    if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
      void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (mapping != MAP_FAILED) data_ = static_cast<char*>(mapping);
    }
    close(fd);
  }
  ~ShmObject() {
    if (data_ != nullptr) munmap(data_, bytes_);
    shm_unlink(key_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  bool ok() const { return data_ != nullptr; }
  const std::string& key() const { return key_; }
  char* data() const { return data_; }

  void Write(size_t offset, const std::vector<float>& values) {
    std::memcpy(data_ + offset, values.data(), values.size() * sizeof(float));
  }
  std::vector<float> Read(size_t offset, size_t count) const {
    std::vector<float> values(count);
    std::memcpy(values.data(), data_ + offset, count * sizeof(float));
    return values;
  }

 private:
  const size_t bytes_;
  std::string key_;
  char* data_ = nullptr;
};

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_SHM_OBJECT_H_
