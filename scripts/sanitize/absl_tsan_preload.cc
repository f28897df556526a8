// Tells ThreadSanitizer about abseil's locks, for the TSan test run of scripts/sanitize.sh,
// which builds this file into a shared library of its own, without any sanitizer, and
// LD_PRELOADs it into every test process.
//
// Why: Debian's libabsl is not built with -fsanitize=thread, so absl::Mutex, CondVar and
// Notification synchronise through atomics and futexes that TSan never sees, and every
// ABSL_GUARDED_BY member touched by two threads would be reported as a race. This library
// interposes the out-of-line entry points those types export, calls the real ones (looked up
// in libabsl_synchronization), and marks the happens-before edge each one creates with
// __tsan_release before giving a lock up and __tsan_acquire after taking it. Reader locks are
// treated as writer locks, which orders readers among themselves: races between two readers
// are races between reads, which are not races. What TSan loses is abseil's lock-order
// (deadlock) checking, which abseil's own debug mode does instead. Being preloaded, it also
// annotates the absl::Mutex inside gRPC's grpc_core::Mutex, which hands our callbacks from
// thread to thread.
//
// Processes without the TSan runtime (python3, which runs some tests) load it too: there the
// weak __tsan_* symbols are null and the wrappers only forward. Thread-safe.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {

#define FD_STRINGIFY_INNER(x) #x
#define FD_STRINGIFY(x) FD_STRINGIFY_INNER(x)

void Acquire(const void* addr) {
  if (__tsan_acquire != nullptr) __tsan_acquire(const_cast<void*>(addr));
}
void Release(const void* addr) {
  if (__tsan_release != nullptr) __tsan_release(const_cast<void*>(addr));
}

// The real function whose Itanium-mangled name is "_ZN" or "_ZNK", then abseil's namespace
// (with its inline namespace, e.g. absl::debian3), then `rest`. It is looked up in abseil's
// library by name rather than with RTLD_NEXT: in python3, the gRPC extension module that
// calls abseil is dlopen()ed with RTLD_LOCAL, where RTLD_NEXT from here cannot see abseil.
template <typename Fn>
Fn Real(bool is_const, const char* rest) {
  static void* const library =
      dlopen("libabsl_synchronization.so." FD_STRINGIFY(ABSL_LTS_RELEASE_VERSION), RTLD_LAZY);
  const std::string inline_ns = FD_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = std::string(is_const ? "_ZNK" : "_ZN") + "4absl" +
                           std::to_string(inline_ns.size()) + inline_ns + rest;
  void* fn = library != nullptr ? dlsym(library, name.c_str()) : nullptr;
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_tsan_preload: %s not found: %s\n", name.c_str(), dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// A Condition whose evaluation TSan sees as done under the lock, as it is: abseil evaluates a
// waiter's condition with the lock held, in the waiting thread or in whichever thread is
// unlocking, and between our annotations. (abseil's own TSan build annotates the same way.)
struct GuardedCondition {
  const absl::Condition* condition;
  const absl::Mutex* mu;
};

bool EvalUnderLock(void* arg) {
  const auto* guarded = static_cast<const GuardedCondition*>(arg);
  Acquire(guarded->mu);
  const bool result = guarded->condition->Eval();
  Release(guarded->mu);
  return result;
}

// The address of Notification::notified_yet_, which HasBeenNotified() (inline, so compiled
// into instrumented code) reads with an acquire load: right after the Mutex.
const void* NotifiedFlag(const absl::Notification* n) {
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

}  // namespace

// REAL(type, mangled rest): the real function, looked up once.
#define REAL(Type, rest)                            \
  static const auto real = Real<Type>(false, rest); \
  (void)0
#define REAL_CONST(Type, rest)                     \
  static const auto real = Real<Type>(true, rest); \
  (void)0

namespace absl {
ABSL_NAMESPACE_BEGIN

using Cond = const Condition&;

void Mutex::Lock() {
  REAL(void (*)(Mutex*), "5Mutex4LockEv");
  real(this);
  Acquire(this);
}

void Mutex::ReaderLock() {
  REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}

bool Mutex::TryLock() {
  REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

void Mutex::Unlock() {
  REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  Release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}

void Mutex::LockWhen(Cond cond) {
  REAL(void (*)(Mutex*, Cond), "5Mutex8LockWhenERKNS0_9ConditionE");
  GuardedCondition guarded = {&cond, this};
  real(this, absl::Condition(&EvalUnderLock, &guarded));
  Acquire(this);
}

void Mutex::ReaderLockWhen(Cond cond) {
  REAL(void (*)(Mutex*, Cond), "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  GuardedCondition guarded = {&cond, this};
  real(this, absl::Condition(&EvalUnderLock, &guarded));
  Acquire(this);
}

// The timed forms hold the lock on return whatever they return.
bool Mutex::LockWhenWithTimeout(Cond cond, Duration timeout) {
  REAL(bool (*)(Mutex*, Cond, Duration),
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  GuardedCondition guarded = {&cond, this};
  const bool result = real(this, absl::Condition(&EvalUnderLock, &guarded), timeout);
  Acquire(this);
  return result;
}

bool Mutex::ReaderLockWhenWithTimeout(Cond cond, Duration timeout) {
  REAL(bool (*)(Mutex*, Cond, Duration),
       "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  GuardedCondition guarded = {&cond, this};
  const bool result = real(this, absl::Condition(&EvalUnderLock, &guarded), timeout);
  Acquire(this);
  return result;
}

bool Mutex::LockWhenWithDeadline(Cond cond, Time deadline) {
  REAL(bool (*)(Mutex*, Cond, Time), "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  GuardedCondition guarded = {&cond, this};
  const bool result = real(this, absl::Condition(&EvalUnderLock, &guarded), deadline);
  Acquire(this);
  return result;
}

bool Mutex::ReaderLockWhenWithDeadline(Cond cond, Time deadline) {
  REAL(bool (*)(Mutex*, Cond, Time),
       "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  GuardedCondition guarded = {&cond, this};
  const bool result = real(this, absl::Condition(&EvalUnderLock, &guarded), deadline);
  Acquire(this);
  return result;
}

// Await gives the lock up while it waits and holds it again on return.
void Mutex::Await(Cond cond) {
  REAL(void (*)(Mutex*, Cond), "5Mutex5AwaitERKNS0_9ConditionE");
  GuardedCondition guarded = {&cond, this};
  Release(this);
  real(this, absl::Condition(&EvalUnderLock, &guarded));
  Acquire(this);
}

bool Mutex::AwaitWithTimeout(Cond cond, Duration timeout) {
  REAL(bool (*)(Mutex*, Cond, Duration),
       "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  GuardedCondition guarded = {&cond, this};
  Release(this);
  const bool result = real(this, absl::Condition(&EvalUnderLock, &guarded), timeout);
  Acquire(this);
  return result;
}

bool Mutex::AwaitWithDeadline(Cond cond, Time deadline) {
  REAL(bool (*)(Mutex*, Cond, Time), "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  GuardedCondition guarded = {&cond, this};
  Release(this);
  const bool result = real(this, absl::Condition(&EvalUnderLock, &guarded), deadline);
  Acquire(this);
  return result;
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, Duration),
       "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool result = real(this, mu, timeout);
  Acquire(mu);
  return result;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, Time), "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool result = real(this, mu, deadline);
  Acquire(mu);
  return result;
}

void Notification::Notify() {
  REAL(void (*)(Notification*), "12Notification6NotifyEv");
  Release(this);
  Release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  REAL_CONST(void (*)(const Notification*), "12Notification19WaitForNotificationEv");
  real(this);
  Acquire(this);
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  REAL_CONST(bool (*)(const Notification*, Duration),
             "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) Acquire(this);
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  REAL_CONST(bool (*)(const Notification*, Time),
             "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) Acquire(this);
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
