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

// Temporaries of the calling thread that outlive one call: a fresh allocation per call faults
// its pages in again on every call (a transformer_small training step at B=32 faulted ~80 MB of
// attention scores and scratchpads a step). Up to kKeptScratchBytes a buffer is kept per thread
// and reused, grown, never shrunk; a larger one is allocated for the call alone, so a thread
// never holds more than a few of these sizes. Contents are left from earlier calls: for what
// an op writes before it reads it.
inline constexpr size_t kKeptScratchBytes = size_t{32} << 20;

// The backend's own loops over at least this many elements (or multiply-adds) share them out
// over the OpenMP threads; below it a parallel region costs more than it saves.
inline constexpr int64_t kParallelElements = int64_t{1} << 16;

// `n` values of type T for one op call: the calling thread's kept buffer number `slot` of that
// type (in [0, 4): an op may hold several at once), or an allocation of its own beyond
// kKeptScratchBytes. Valid while the object lives and the thread asks for no other Scratch<T>
// of that slot.
template <typename T>
class Scratch {
 public:
  Scratch(int slot, int64_t n) {
    const auto count = static_cast<size_t>(n);
    if (count * sizeof(T) > kKeptScratchBytes) {
      owned_ = std::make_unique_for_overwrite<T[]>(count);
      data_ = owned_.get();
      return;
    }
    thread_local std::array<std::vector<T>, 4> kept;
    std::vector<T>& buffer = kept.at(static_cast<size_t>(slot));
    if (buffer.size() < count) buffer.resize(count);
    data_ = buffer.data();
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  T* data() const { return data_; }

 private:
  std::unique_ptr<T[]> owned_;
  T* data_ = nullptr;
};
using ScratchFloats = Scratch<float>;
using ScratchBf16 = Scratch<uint16_t>;  // bfloat16 values (backends/cpu/bf16.h)

// The scratchpad of one primitive call, 64-byte aligned: the calling thread's kept one (one
// primitive runs at a time on a thread: Execute waits for it), or its own beyond
// kKeptScratchBytes.
class Scratchpad {
 public:
  explicit Scratchpad(size_t bytes) {
    constexpr size_t kAlign = 64;
    if (bytes > kKeptScratchBytes) {
      owned_ = std::make_unique_for_overwrite<std::byte[]>(bytes + kAlign);
      data_ = Align(owned_.get(), kAlign);
      return;
    }
    struct Kept {
      std::unique_ptr<std::byte[]> data;
      size_t size = 0;
    };
    thread_local Kept kept;
    if (kept.size < bytes) {
      kept.data = std::make_unique_for_overwrite<std::byte[]>(bytes + kAlign);
      kept.size = bytes;
    }
    data_ = Align(kept.data.get(), kAlign);
  }
  Scratchpad(const Scratchpad&) = delete;
  Scratchpad& operator=(const Scratchpad&) = delete;

  void* data() const { return data_; }

 private:
  static std::byte* Align(std::byte* p, size_t align) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    return p + (align - at % align) % align;
  }
  std::unique_ptr<std::byte[]> owned_;
  std::byte* data_ = nullptr;
};

// Runs `p` on `stream` with `args`, adding its scratchpad for this call, and waits for it, so
// the scratchpad and the caller's temporaries outlive the work.
inline void Execute(dnnl::stream& stream, const DnnlPrimitive& p, Args args) {
  const size_t bytes = p.scratchpad_md.get_size();
  std::optional<Scratchpad> scratchpad;
  if (bytes > 0) {
    scratchpad.emplace(bytes);
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(p.scratchpad_md, stream.get_engine(), scratchpad->data()));
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
