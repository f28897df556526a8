// The thread-safety check's self-test (tests/lint/CMakeLists.txt): with the flags the check
// gives the project's sources, clang must report each unannotated access below and nothing
// else (`-Xclang -verify` matches the diagnostics against the comments). Never built.

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace forecastd {

class Counter {
 public:
  int ReadWithoutLock() const {
    return count_;  // expected-error {{reading variable 'count_' requires holding mutex 'mu_'}}
  }

  void CallLockedWithoutLock() {
    IncrementLocked();  // expected-error {{calling function 'IncrementLocked' requires holding}}
  }

  // A condition lambda runs with mu_ held, but clang does not know that unless it says so.
  void WaitUnannotated(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() {
      return count_ >= n;  // expected-error {{reading variable 'count_' requires holding}}
    };
    mu_.Await(absl::Condition(&enough));
  }

  // The forms the project uses, which pass.
  void WaitAnnotated(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ >= n; };
    mu_.Await(absl::Condition(&enough));
  }
  int RunAnnotated() {
    return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      IncrementLocked();
      return count_;
    });
  }

 private:
  int Run(absl::FunctionRef<int()> body) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return body();
  }
  void IncrementLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++count_; }

  mutable absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace forecastd
