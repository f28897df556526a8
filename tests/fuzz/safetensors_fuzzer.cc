// Fuzz target: SafetensorsFile::FromBytes (engine/safetensors.h) on untrusted bytes, the
// reader every model load and checkpoint resume goes through. For a file it accepts, checks
// what the rest of forecastd relies on: every tensor's bytes lie inside the data buffer and
// agree with its dtype and shape, the tensors tile the buffer, F32 tensors read back as their
// bytes, a file of F32 tensors survives a write and re-read unchanged, and loading it into a
// model (LoadWeights' per-parameter copy) either succeeds or fails cleanly.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/safetensors.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_models.h"

namespace forecastd {
namespace {

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;  // the reader has checked for overflow
  return n;
}

// The layout invariants of an accepted file whose bytes are `bytes`.
void CheckLayout(const SafetensorsFile& file, const std::string& bytes) {
  uint64_t header_size = 0;
  for (int b = 7; b >= 0; --b) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[b]);
  FUZZ_CHECK(header_size <= bytes.size() - 8, "accepted a header longer than the file");
  const auto* data_begin = reinterpret_cast<const uint8_t*>(bytes.data()) + 8 + header_size;
  const int64_t data_size = static_cast<int64_t>(bytes.size() - 8 - header_size);
  int64_t covered = 0;
  for (const auto& [name, info] : file.tensors()) {
    const std::string what = absl::StrCat("tensor \"", name, "\"");
    FUZZ_CHECK(Product(info.shape) == info.numel, what + ": numel is not the shape's product");
    FUZZ_CHECK(
        0 <= info.data_begin && info.data_begin <= info.data_end && info.data_end <= data_size,
        what + ": data_offsets outside the data buffer");
    FUZZ_CHECK(info.data_end - info.data_begin == info.numel * DtypeSizeBytes(info.dtype),
               what + ": data_offsets disagree with dtype and shape");
    FUZZ_CHECK(info.data.size() == static_cast<size_t>(info.data_end - info.data_begin),
               what + ": span size differs from data_offsets");
    // The span must point into the file's own copy of the bytes, at the same offset.
    if (!info.data.empty()) {
      FUZZ_CHECK(std::memcmp(info.data.data(), data_begin + info.data_begin, info.data.size()) == 0,
                 what + ": span bytes differ from the file's bytes at data_offsets");
    }
    covered += info.data_end - info.data_begin;
  }
  FUZZ_CHECK(covered == data_size, "accepted tensors do not tile the data buffer");
}

// Accepted F32 tensors read back through ReadF32, and a file of F32 tensors only is written
// back (in offset order) and re-read with the same names, shapes, values and metadata.
void CheckF32RoundTrip(const SafetensorsFile& file) {
  std::vector<std::pair<int64_t, std::string>> order;
  std::map<std::string, std::vector<float>> values;
  // The writer takes F32 tensors with non-empty names only (by design; the reader is more
  // lenient), so only such files are written back.
  bool writable = true;
  for (const auto& [name, info] : file.tensors()) {
    if (name.empty()) writable = false;
    if (info.dtype != Dtype::kF32) {
      writable = false;
      continue;
    }
    absl::StatusOr<std::vector<float>> read = file.ReadF32(name, info.shape);
    FUZZ_CHECK(read.ok(), read.status().ToString());
    FUZZ_CHECK(read->size() * sizeof(float) == info.data.size() &&
                   (info.data.empty() ||
                    std::memcmp(read->data(), info.data.data(), info.data.size()) == 0),
               "ReadF32 differs from the tensor's bytes");
    order.emplace_back(info.data_begin, name);
    values[name] = *std::move(read);
  }
  if (!writable) return;
  std::sort(order.begin(), order.end());
  std::vector<NamedTensor> tensors;
  for (const auto& [offset, name] : order) {
    tensors.push_back({name, file.tensors().at(name).shape, values[name]});
  }
  absl::StatusOr<std::string> written = SerializeSafetensors(tensors, file.metadata());
  FUZZ_CHECK(written.ok(),
             "the writer refuses a file the reader accepted: " + written.status().ToString());
  absl::StatusOr<SafetensorsFile> reread = SafetensorsFile::FromBytes(*written, "rewritten");
  FUZZ_CHECK(reread.ok(),
             "the reader refuses what the writer wrote: " + reread.status().ToString());
  FUZZ_CHECK(reread->metadata() == file.metadata(), "metadata changed in a round trip");
  FUZZ_CHECK(reread->tensors().size() == file.tensors().size(), "tensor count changed");
  for (const auto& [name, info] : file.tensors()) {
    const auto it = reread->tensors().find(name);
    FUZZ_CHECK(it != reread->tensors().end(), "tensor \"" + name + "\" lost in a round trip");
    FUZZ_CHECK(it->second.shape == info.shape && it->second.data.size() == info.data.size() &&
                   (info.data.empty() ||
                    std::memcmp(it->second.data.data(), info.data.data(), info.data.size()) == 0),
               "tensor \"" + name + "\" changed in a round trip");
  }
}

// LoadWeights' per-parameter copy into a real model: errors are the documented ones.
void CheckLoad(const SafetensorsFile& file, const Forecaster& model) {
  const ParameterArena& arena = model.parameters();
  std::vector<float> staged(static_cast<size_t>(arena.size()));
  for (const ParameterSpec& spec : arena.specs()) {
    const absl::Status status =
        file.CopyF32(spec.name, spec.shape,
                     absl::MakeSpan(staged.data() + spec.offset, static_cast<size_t>(spec.numel)));
    FUZZ_CHECK(status.ok() || status.code() == absl::StatusCode::kNotFound ||
                   status.code() == absl::StatusCode::kInvalidArgument,
               status.ToString());
    if (!status.ok()) return;
  }
}

}  // namespace
}  // namespace forecastd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using forecastd::SafetensorsFile;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::FromBytes(bytes, "fuzz.safetensors");
  if (!file.ok()) {
    FUZZ_CHECK(file.status().code() == absl::StatusCode::kInvalidArgument ||
                   file.status().code() == absl::StatusCode::kDataLoss,
               "undocumented error code: " + file.status().ToString());
    return 0;
  }
  forecastd::CheckLayout(*file, bytes);
  forecastd::CheckF32RoundTrip(*file);
  forecastd::CheckLoad(*file, forecastd::fuzz::LstmModel());
  forecastd::CheckLoad(*file, forecastd::fuzz::TransformerModel());
  return 0;
}
