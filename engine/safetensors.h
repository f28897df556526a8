// Reads and writes safetensors files, the format of `models/<name>/<version>/model.safetensors`:
// an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to its
// dtype, shape and data_offsets (plus an optional "__metadata__" object of strings), then the
// row-major little-endian data. Files written by PyTorch's `safetensors` load here, and ours
// load there. Model loading and checkpointing call this.
// SafetensorsFile is immutable after Read and thread-safe; WriteSafetensors is thread-safe.
#ifndef FORECASTD_ENGINE_SAFETENSORS_H_
#define FORECASTD_ENGINE_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace forecastd {

// The byte-sized safetensors dtypes. The sub-byte ones (F4, F6_*) are refused as unsupported.
enum class Dtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

// The name the header uses, e.g. "F32", "BF16", "F8_E4M3".
absl::string_view DtypeName(Dtype dtype);
int64_t DtypeSizeBytes(Dtype dtype);
// nullopt for a name that is not one of the dtypes above.
std::optional<Dtype> ParseDtype(absl::string_view name);

// One tensor of a file, as its header describes it.
struct TensorInfo {
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;  // empty for a scalar
  int64_t numel = 0;           // product of shape
  int64_t data_begin = 0;      // data_offsets, relative to the start of the data buffer
  int64_t data_end = 0;
  // Its bytes (row-major, little-endian), inside the file's buffer: valid while the
  // SafetensorsFile lives, moves included. Not aligned for any type: copy out with memcpy.
  absl::Span<const uint8_t> data;
};

// A whole safetensors file held in memory, validated once by Read/FromBytes.
//
// Errors name the file (`source`) and the problem:
//   DATA_LOSS         bytes are missing: shorter than 8 bytes, the header or a tensor runs
//                     past the end of the file;
//   INVALID_ARGUMENT  everything else malformed: header length over kMaxHeaderBytes, not
//                     UTF-8 JSON, not an object, an entry lacking or mistyping dtype / shape /
//                     data_offsets, unknown dtype, negative or fractional dims, overflowing
//                     sizes, data_offsets disagreeing with dtype and shape, tensors that
//                     overlap or leave holes or trailing bytes in the data buffer, duplicate
//                     names, "__metadata__" not an object of strings; a directory;
//   NOT_FOUND         a missing file (or, from the accessors, a missing tensor).
// Unknown keys inside a tensor's entry are ignored, as the reference implementation does.
class SafetensorsFile {
 public:
  // The reference implementation's cap; a longer header is corrupt, not a model.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  static absl::StatusOr<SafetensorsFile> Read(const std::string& path);
  // `source` names the bytes in error messages.
  static absl::StatusOr<SafetensorsFile> FromBytes(std::string bytes,
                                                   std::string source = "<memory>");

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::string& source() const { return source_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // NOT_FOUND naming the tensor and the file when there is no tensor `name`.
  absl::StatusOr<const TensorInfo*> Find(absl::string_view name) const;

  // The F32 tensor `name`, which must have exactly `expected_shape`. NOT_FOUND when it is
  // missing; INVALID_ARGUMENT, naming both, when its dtype is not F32 or its shape differs.
  absl::StatusOr<std::vector<float>> ReadF32(absl::string_view name,
                                             absl::Span<const int64_t> expected_shape) const;
  // As ReadF32, into `out`, whose size must be the product of `expected_shape` (a programmer
  // error otherwise, reported as INVALID_ARGUMENT). `out` is untouched on error.
  absl::Status CopyF32(absl::string_view name, absl::Span<const int64_t> expected_shape,
                       absl::Span<float> out) const;

 private:
  SafetensorsFile() = default;
  absl::Status Parse();
  // Find, then the dtype and shape checks of ReadF32.
  absl::StatusOr<const TensorInfo*> FindF32(absl::string_view name,
                                            absl::Span<const int64_t> expected_shape) const;

  std::string source_;
  // On the heap so that TensorInfo::data stays valid when the file object moves.
  std::unique_ptr<const std::string> bytes_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One F32 tensor to write. `data` is not owned: it must outlive the write (a span over a
// ParameterArena, or over a vector the caller keeps).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<const float> data;  // row-major, product(shape) floats
};

// The bytes of a safetensors file holding `tensors`, laid out in the order given with
// contiguous offsets; the header lists "__metadata__" first (when `metadata` is not empty),
// then the tensors in that order, as compact JSON padded with spaces to a multiple of 8.
// Given tensors in the Python library's order (alignment, then name), the bytes equal its.
// INVALID_ARGUMENT for an empty, repeated or "__metadata__" name, a name or metadata that is
// not UTF-8, a negative dim, or data whose size is not the product of the shape.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata);

// Writes SerializeSafetensors' bytes to `path` atomically: a temp file in the same
// directory, written, fsynced, renamed over `path`, then the directory fsynced. Readers see
// the old file or the new one, never a part; on error the temp file is removed.
absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SAFETENSORS_H_
