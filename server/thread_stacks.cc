// Part of the forecastd executable: raises the stack size a library asks for its threads to
// at least kMinThreadStackBytes.
//
// glibc carves the static TLS of every library loaded at start out of each new thread's
// stack, and pthread_create fails (EINVAL) when the requested stack cannot hold it. civetweb,
// which serves /metrics under prometheus-cpp's Exposer, creates its threads with a fixed
// 100 KiB stack, while a CUDA build loads cuBLAS, cuBLASLt, NCCL and the CUDA runtime at start,
// whose static TLS alone is about 120 KiB: the metrics endpoint could not start. This
// definition of pthread_attr_setstacksize, exported from the executable
// (--export-dynamic-symbol, server/CMakeLists.txt), is the one every library's calls bind to;
// it forwards to glibc's with the larger size. Sizes already larger pass unchanged.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>

namespace {

constexpr size_t kMinThreadStackBytes = size_t{1} << 20;

using SetStackSizeFn = int (*)(pthread_attr_t*, size_t);

SetStackSizeFn GlibcSetStackSize() {
  static const SetStackSizeFn next =
      reinterpret_cast<SetStackSizeFn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return next;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t stack_bytes) {
  const SetStackSizeFn next = GlibcSetStackSize();
  if (next == nullptr) return ENOSYS;
  return next(attr, std::max(stack_bytes, kMinThreadStackBytes));
}
