// A built oneDNN primitive with its user-managed scratchpad, and the helpers that build and run
// one; shared by the files of the oneDNN backend (backends/cpu/) only. Every primitive is built
// with scratchpad_mode::user and each execution allocates its own scratchpad, so one cached
// primitive may run on several threads at once. The functions here throw dnnl::error; callers
// wrap them in DNNL_TRY. Thread-safe: a DnnlPrimitive is immutable once built.
#ifndef FORECASTD_BACKENDS_CPU_DNNL_PRIMITIVE_H_
#define FORECASTD_BACKENDS_CPU_DNNL_PRIMITIVE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace forecastd::dnnl_internal {

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
// Execution arguments. Written `Args args({...})` inside DNNL_TRY, whose single macro argument
// must not hold a comma outside parentheses.
using Args = std::unordered_map<int, dnnl::memory>;

struct DnnlPrimitive {
  dnnl::primitive primitive;
  dnnl::memory::desc scratchpad_md;  // zero-sized when the primitive needs none
};

// The attributes every primitive of the backend is built with (see the file comment).
inline dnnl::primitive_attr UserScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// `Primitive` is the oneDNN primitive class (dnnl::matmul, ...); `pd` its primitive descriptor,
// built with UserScratchpadAttr() (or attributes that include it).
template <typename Primitive>
DnnlPrimitive MakeDnnlPrimitive(const typename Primitive::primitive_desc& pd) {
  return DnnlPrimitive{Primitive(pd), pd.scratchpad_desc()};
}

// A dense fp32 memory descriptor.
inline dnnl::memory::desc F32(const Dims& dims, Tag tag) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag);
}
inline dnnl::memory::desc F32Strided(const Dims& dims, const Dims& strides) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

// Memory over caller-owned data; oneDNN takes a non-const handle even for inputs it only reads.
inline dnnl::memory Wrap(const dnnl::memory::desc& md, const dnnl::engine& engine,
                         const float* data) {
  return dnnl::memory(md, engine, const_cast<float*>(data));
}

// Runs `p` on `stream` with `args`, adding a scratchpad of its own for this call, and waits for
// it, so the scratchpad and the caller's temporaries outlive the work.
// The calling thread's scratchpad for the primitives it executes, at least `bytes`, 64-byte
// aligned; grown, never shrunk. One primitive runs at a time on a thread (Execute waits for it),
// so one buffer serves them all: a fresh allocation per call would fault its pages in again
// on every call (a training step's primitives asked for tens of megabytes a step).
inline void* ThreadScratchpad(size_t bytes) {
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;
    std::byte* aligned = nullptr;
  };
  thread_local Buffer buffer;
  if (buffer.size < bytes) {
    constexpr size_t kAlign = 64;
    buffer.data = std::make_unique<std::byte[]>(bytes + kAlign);
    const auto at = reinterpret_cast<std::uintptr_t>(buffer.data.get());
    buffer.aligned = buffer.data.get() + ((kAlign - at % kAlign) % kAlign);
    buffer.size = bytes;
  }
  return buffer.aligned;
}

// `n` floats of the calling thread's temporary buffer number `slot` (in [0, 4): an op may hold
// several at once), grown, never shrunk, contents left from earlier calls: for temporaries an
// op writes before it reads them, valid until the thread asks for that slot again. A fresh
// vector per call would fault its pages in on every call (a transformer_small training step at
// B=32 faulted ~80 MB of attention scores in a step).
inline float* ThreadFloats(int slot, int64_t n) {
  thread_local std::array<std::vector<float>, 4> buffers;
  std::vector<float>& buffer = buffers.at(static_cast<size_t>(slot));
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

inline void Execute(dnnl::stream& stream, const DnnlPrimitive& p, Args args) {
  if (const size_t bytes = p.scratchpad_md.get_size(); bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(p.scratchpad_md, stream.get_engine(), ThreadScratchpad(bytes)));
  }
  p.primitive.execute(stream, args);
  stream.wait();
}

// A reorder from layout `from` to layout `to`, or none when they are the same.
inline std::optional<DnnlPrimitive> MaybeReorder(const dnnl::engine& engine,
                                                 const dnnl::memory::desc& from,
                                                 const dnnl::memory::desc& to) {
  if (from == to) return std::nullopt;
  return MakeDnnlPrimitive<dnnl::reorder>(
      dnnl::reorder::primitive_desc(engine, from, engine, to, UserScratchpadAttr()));
}

// `user` reordered by `reorder` (from MaybeReorder) into a new memory of layout `md`, or `user`
// itself when there is no reorder.
inline dnnl::memory Reordered(dnnl::stream& stream, const std::optional<DnnlPrimitive>& reorder,
                              const dnnl::memory::desc& md, const dnnl::memory& user) {
  if (!reorder.has_value()) return user;
  dnnl::memory reordered(md, stream.get_engine());
  Execute(stream, *reorder, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, reordered}});
  return reordered;
}

}  // namespace forecastd::dnnl_internal

#endif  // FORECASTD_BACKENDS_CPU_DNNL_PRIMITIVE_H_
