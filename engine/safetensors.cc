#include "engine/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/file_io.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/base/status.h"

namespace forecastd {

// Tensor bytes are handed out and written as the host's floats.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this host is not");

namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

constexpr char kMetadataKey[] = "__metadata__";
// JSON numbers arrive as doubles; above 2^53 they are no longer exact integers.
constexpr double kMaxExactInteger = 9007199254740992.0;
// A valid header nests three deep (object, entry, shape). protobuf's parser takes very long
// on deeply nested input, so deeper input is refused before it gets there.
constexpr int kMaxJsonDepth = 16;

struct DtypeEntry {
  Dtype dtype;
  absl::string_view name;
  int64_t size_bytes;
};

constexpr DtypeEntry kDtypes[] = {
    {Dtype::kBool, "BOOL", 1},      {Dtype::kU8, "U8", 1},          {Dtype::kI8, "I8", 1},
    {Dtype::kF8E5M2, "F8_E5M2", 1}, {Dtype::kF8E4M3, "F8_E4M3", 1}, {Dtype::kF8E8M0, "F8_E8M0", 1},
    {Dtype::kI16, "I16", 2},        {Dtype::kU16, "U16", 2},        {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},      {Dtype::kI32, "I32", 4},        {Dtype::kU32, "U32", 4},
    {Dtype::kF32, "F32", 4},        {Dtype::kC64, "C64", 8},        {Dtype::kF64, "F64", 8},
    {Dtype::kI64, "I64", 8},        {Dtype::kU64, "U64", 8},
};

const DtypeEntry& EntryOf(Dtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e;
  }
  return kDtypes[0];  // unreachable: every enumerator is in the table
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF.
bool IsValidUtf8(absl::string_view s) {
  static constexpr uint32_t kMinCodePoint[] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t extra;
    uint32_t cp;
    if ((lead & 0xE0) == 0xC0) {
      extra = 1, cp = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      extra = 2, cp = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      extra = 3, cp = lead & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < kMinCodePoint[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

// protobuf's parse errors are "reason\n<context>\n<caret>"; keep them on one line.
std::string OneLine(absl::string_view message) {
  const size_t first_end = message.find('\n');
  if (first_end == absl::string_view::npos) return std::string(message);
  std::string out(message.substr(0, first_end));
  absl::string_view context = message.substr(first_end + 1);
  context = context.substr(0, std::min(context.find('\n'), size_t{40}));
  if (!context.empty()) absl::StrAppend(&out, " near `", context, "`");
  return out;
}

// What protobuf's parser does not check, on the raw text and before it runs: the nesting
// depth, and repeated top-level names (protobuf refuses those too, but its message names a
// map key; this one names the tensor). Only brackets and strings are looked at: anything
// else malformed is left for the parser to report.
absl::Status ScanHeader(absl::string_view json, absl::string_view source) {
  size_t i = json.find_first_not_of(" \t\r\n");
  if (i == absl::string_view::npos || json[i] != '{') {
    return absl::InvalidArgumentError(absl::StrCat(source, ": header is not a JSON object"));
  }
  std::set<absl::string_view> names;
  int depth = 0;
  std::optional<absl::string_view> pending_name;  // a top-level string, a name if ':' follows
  for (; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '"') {
      const size_t begin = ++i;
      while (i < json.size() && json[i] != '"') i += json[i] == '\\' ? 2 : 1;
      if (i >= json.size()) break;  // unterminated; the parser says so
      if (depth == 1) pending_name = json.substr(begin, i - begin);
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (c == ':' && depth == 1 && pending_name && !names.insert(*pending_name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": duplicate tensor name \"", *pending_name, "\" in the header"));
    }
    pending_name.reset();
    if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": header JSON nests deeper than ", kMaxJsonDepth, " levels"));
      }
    } else if (c == '}' || c == ']') {
      if (--depth == 0) break;  // the end of the top-level object; the parser checks the rest
    }
  }
  return absl::OkStatus();
}

// A JSON number that must be an exact non-negative integer.
absl::StatusOr<int64_t> NonNegativeInteger(const Value& value, absl::string_view what,
                                           absl::string_view context) {
  if (value.kind_case() != Value::kNumberValue) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": ", what, " is not a number"));
  }
  const double v = value.number_value();
  if (!std::isfinite(v) || v != std::floor(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", what, " is ", v, ", not an integer"));
  }
  if (v < 0) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": ", what, " is negative (", v, ")"));
  }
  if (v > kMaxExactInteger) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", what, " is ", v, ", above 2^53 (not exact in JSON)"));
  }
  return static_cast<int64_t>(v);
}

const Value* FieldOrNull(const Struct& s, const std::string& key) {
  const auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

// Checks one header entry against the data buffer's size, without looking at other entries.
absl::StatusOr<TensorInfo> ParseEntry(const Value& entry, int64_t data_size,
                                      absl::string_view context) {
  if (entry.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": entry is not a JSON object"));
  }
  const Struct& fields = entry.struct_value();
  const Value* dtype = FieldOrNull(fields, "dtype");
  const Value* shape = FieldOrNull(fields, "shape");
  const Value* offsets = FieldOrNull(fields, "data_offsets");
  for (const auto& [value, key] :
       {std::pair{dtype, "dtype"}, std::pair{shape, "shape"}, std::pair{offsets, "data_offsets"}}) {
    if (value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": entry has no \"", key, "\""));
    }
  }

  TensorInfo info;
  if (dtype->kind_case() != Value::kStringValue) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": \"dtype\" is not a string"));
  }
  const std::optional<Dtype> parsed = ParseDtype(dtype->string_value());
  if (!parsed) {
    std::vector<absl::string_view> known;
    for (const DtypeEntry& e : kDtypes) known.push_back(e.name);
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": unknown or unsupported dtype \"", dtype->string_value(),
                     "\" (supported: ", absl::StrJoin(known, ", "), ")"));
  }
  info.dtype = *parsed;

  if (shape->kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": \"shape\" is not an array"));
  }
  info.numel = 1;
  for (int d = 0; d < shape->list_value().values_size(); ++d) {
    ASSIGN_OR_RETURN(
        const int64_t dim,
        NonNegativeInteger(shape->list_value().values(d), absl::StrCat("shape[", d, "]"), context));
    info.shape.push_back(dim);
    if (__builtin_mul_overflow(info.numel, dim, &info.numel)) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": shape ", ShapeString(info.shape), "... overflows 64 bits"));
    }
  }
  int64_t size_bytes;
  if (__builtin_mul_overflow(info.numel, DtypeSizeBytes(info.dtype), &size_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": shape ", ShapeString(info.shape),
                                                   " of ", DtypeName(info.dtype),
                                                   " overflows 64 bits in bytes"));
  }

  if (offsets->kind_case() != Value::kListValue || offsets->list_value().values_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": \"data_offsets\" is not an array [begin, end]"));
  }
  ASSIGN_OR_RETURN(info.data_begin,
                   NonNegativeInteger(offsets->list_value().values(0), "data_offsets[0]", context));
  ASSIGN_OR_RETURN(info.data_end,
                   NonNegativeInteger(offsets->list_value().values(1), "data_offsets[1]", context));
  if (info.data_end < info.data_begin) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": data_offsets [", info.data_begin,
                                                   ", ", info.data_end, "] end before they begin"));
  }
  if (info.data_end > data_size) {
    return absl::DataLossError(absl::StrCat(context, ": data_offsets [", info.data_begin, ", ",
                                            info.data_end, "] run past the end of the ", data_size,
                                            "-byte data buffer (truncated file?)"));
  }
  if (info.data_end - info.data_begin != size_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": shape ", ShapeString(info.shape), " of ", DtypeName(info.dtype),
                     " needs ", size_bytes, " bytes but data_offsets [", info.data_begin, ", ",
                     info.data_end, "] hold ", info.data_end - info.data_begin));
  }
  return info;
}

// serde_json's escaping, so that our headers match the Python library's byte for byte.
void AppendJsonString(absl::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

// The 8-byte length followed by the padded header; the data follows it, tensor by tensor.
absl::StatusOr<std::string> BuildPrefix(const std::vector<NamedTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    AppendJsonString(kMetadataKey, &json);
    json.append(":{");
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors metadata \"", key, "\" is not valid UTF-8"));
      }
      if (!first) json.push_back(',');
      first = false;
      AppendJsonString(key, &json);
      json.push_back(':');
      AppendJsonString(value, &json);
    }
    json.push_back('}');
  }
  std::set<absl::string_view> names;
  int64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    const std::string context = absl::StrCat("safetensors tensor \"", t.name, "\"");
    if (t.name.empty() || t.name == kMetadataKey || !IsValidUtf8(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": a name must be non-empty UTF-8 other than ", kMetadataKey));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": name given twice"));
    }
    int64_t numel = 1;
    for (const int64_t dim : t.shape) {
      if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) {
        return absl::InvalidArgumentError(
            absl::StrCat(context, ": bad shape ", ShapeString(t.shape)));
      }
    }
    if (static_cast<uint64_t>(numel) != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": shape ", ShapeString(t.shape),
                                                     " has ", numel, " elements but ",
                                                     t.data.size(), " floats were given"));
    }
    const int64_t end = offset + numel * static_cast<int64_t>(sizeof(float));
    if (json.size() > 1) json.push_back(',');
    AppendJsonString(t.name, &json);
    absl::StrAppend(&json, ":{\"dtype\":\"F32\",\"shape\":[", absl::StrJoin(t.shape, ","),
                    "],\"data_offsets\":[", offset, ",", end, "]}");
    offset = end;
  }
  json.push_back('}');
  json.append((8 - json.size() % 8) % 8, ' ');
  if (json.size() > SafetensorsFile::kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors header of ", json.size(), " bytes is over the readers' limit"));
  }
  std::string prefix(8, '\0');
  for (int b = 0; b < 8; ++b) prefix[b] = static_cast<char>((json.size() >> (8 * b)) & 0xFF);
  return prefix + json;
}

absl::string_view BytesOf(const NamedTensor& t) {
  return absl::string_view(reinterpret_cast<const char*>(t.data.data()),
                           t.data.size() * sizeof(float));
}

}  // namespace

absl::string_view DtypeName(Dtype dtype) { return EntryOf(dtype).name; }

int64_t DtypeSizeBytes(Dtype dtype) { return EntryOf(dtype).size_bytes; }

std::optional<Dtype> ParseDtype(absl::string_view name) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Read(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path, "safetensors file"));
  return FromBytes(std::move(bytes), path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromBytes(std::string bytes, std::string source) {
  SafetensorsFile file;
  file.source_ = std::move(source);
  file.bytes_ = std::make_unique<const std::string>(std::move(bytes));
  RETURN_IF_ERROR(file.Parse());
  return file;
}

absl::Status SafetensorsFile::Parse() {
  const std::string& bytes = *bytes_;
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(source_, ": file is ", bytes.size(),
                                            " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_size = 0;
  for (int b = 7; b >= 0; --b) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[b]);
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": header length ", header_size,
                                                   " is over the limit of ", kMaxHeaderBytes,
                                                   " bytes (not a safetensors file?)"));
  }
  if (header_size > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat(source_, ": header length ", header_size,
                                            " runs past the end of the file (", bytes.size() - 8,
                                            " bytes after the length)"));
  }
  const absl::string_view header = absl::string_view(bytes).substr(8, header_size);
  const absl::string_view data = absl::string_view(bytes).substr(8 + header_size);
  const auto data_size = static_cast<int64_t>(data.size());

  if (!IsValidUtf8(header)) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": header is not valid UTF-8"));
  }
  RETURN_IF_ERROR(ScanHeader(header, source_));
  Value root;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(header.data(), header.size()), &root);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": header is not valid JSON: ",
                     OneLine(absl::string_view(parsed.message().data(), parsed.message().size()))));
  }
  if (root.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": header is not a JSON object"));
  }

  // In name order, so that which of several problems is reported does not depend on hashing.
  std::map<absl::string_view, const Value*> entries;
  for (const auto& [name, value] : root.struct_value().fields()) entries.emplace(name, &value);

  std::vector<std::pair<const TensorInfo*, absl::string_view>> by_offset;
  for (const auto& [name, value] : entries) {
    if (name == kMetadataKey) {
      if (value->kind_case() != Value::kStructValue) {
        return absl::InvalidArgumentError(
            absl::StrCat(source_, ": \"", kMetadataKey, "\" is not a JSON object"));
      }
      for (const auto& [key, item] : value->struct_value().fields()) {
        if (item.kind_case() != Value::kStringValue) {
          return absl::InvalidArgumentError(absl::StrCat(
              source_, ": \"", kMetadataKey, "\" value for \"", key, "\" is not a string"));
        }
        metadata_.emplace(key, item.string_value());
      }
      continue;
    }
    ASSIGN_OR_RETURN(TensorInfo info, ParseEntry(*value, data_size,
                                                 absl::StrCat(source_, ": tensor \"", name, "\"")));
    info.data = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()) + info.data_begin,
                                    static_cast<size_t>(info.data_end - info.data_begin));
    const auto [it, inserted] = tensors_.emplace(std::string(name), std::move(info));
    by_offset.emplace_back(&it->second, it->first);
  }

  // The tensors must tile the data buffer: no overlap, no hole, nothing left over.
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::pair(a.first->data_begin, a.first->data_end) <
           std::pair(b.first->data_begin, b.first->data_end);
  });
  int64_t covered = 0;
  absl::string_view previous;
  for (const auto& [info, name] : by_offset) {
    if (info->data_begin < covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": tensor \"", name, "\" at data_offsets [", info->data_begin, ", ",
          info->data_end, "] overlaps tensor \"", previous, "\", which ends at ", covered));
    }
    if (info->data_begin > covered) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": hole in the data buffer: bytes [",
                                                     covered, ", ", info->data_begin,
                                                     ") belong to no tensor"));
    }
    covered = info->data_end;
    previous = name;
  }
  if (covered != data_size) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": the data buffer has ", data_size,
                                                   " bytes but the tensors cover only ", covered,
                                                   " (trailing bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const TensorInfo*> SafetensorsFile::Find(absl::string_view name) const {
  const auto it = tensors_.find(std::string(name));
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(source_, ": no tensor named \"", name,
                                            "\" (the file has ", tensors_.size(), " tensors)"));
  }
  return &it->second;
}

absl::StatusOr<const TensorInfo*> SafetensorsFile::FindF32(
    absl::string_view name, absl::Span<const int64_t> expected_shape) const {
  ASSIGN_OR_RETURN(const TensorInfo* info, Find(name));
  if (info->dtype != Dtype::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": tensor \"", name, "\" is ",
                                                   DtypeName(info->dtype), ", expected F32"));
  }
  if (!std::equal(info->shape.begin(), info->shape.end(), expected_shape.begin(),
                  expected_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": tensor \"", name, "\" has shape ",
                                                   ShapeString(info->shape), ", expected ",
                                                   ShapeString(expected_shape)));
  }
  return info;
}

absl::Status SafetensorsFile::CopyF32(absl::string_view name,
                                      absl::Span<const int64_t> expected_shape,
                                      absl::Span<float> out) const {
  ASSIGN_OR_RETURN(const TensorInfo* info, FindF32(name, expected_shape));
  if (out.size() != static_cast<size_t>(info->numel)) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": CopyF32(\"", name, "\") into ",
                                                   out.size(), " floats; the tensor has ",
                                                   info->numel));
  }
  if (!info->data.empty()) std::memcpy(out.data(), info->data.data(), info->data.size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadF32(
    absl::string_view name, absl::Span<const int64_t> expected_shape) const {
  ASSIGN_OR_RETURN(const TensorInfo* info, FindF32(name, expected_shape));
  std::vector<float> values(static_cast<size_t>(info->numel));
  if (!info->data.empty()) std::memcpy(values.data(), info->data.data(), info->data.size());
  return values;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string bytes, BuildPrefix(tensors, metadata));
  for (const NamedTensor& t : tensors) absl::StrAppend(&bytes, BytesOf(t));
  return bytes;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string prefix, BuildPrefix(tensors, metadata));
  std::vector<absl::string_view> pieces = {prefix};
  for (const NamedTensor& t : tensors) pieces.push_back(BytesOf(t));
  return WriteFileAtomically(path, pieces);
}

}  // namespace forecastd
