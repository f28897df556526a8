#include "engine/safetensors.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

std::string Le64(uint64_t n) {
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[b] = static_cast<char>((n >> (8 * b)) & 0xFF);
  return out;
}

// A file as the Python library lays it out: length, header padded with spaces to 8, data.
std::string MakeFile(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return Le64(header.size()) + header + data;
}

std::string F32Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::string BytesOf(absl::Span<const uint8_t> span) {
  return std::string(reinterpret_cast<const char*>(span.data()), span.size());
}

std::string ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh directory, removed with everything in it at scope exit.
struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "safetensors_test.XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename());
    return names;
  }
  fs::path path;
};

// A small F32 entry: {"dtype":"F32","shape":[n],"data_offsets":[begin,end]}.
std::string Entry(int n, int begin, int end, absl::string_view dtype = "F32") {
  return absl::StrCat(R"({"dtype":")", dtype, R"(","shape":[)", n, R"(],"data_offsets":[)", begin,
                      ",", end, "]}");
}

void RequireError(const std::string& bytes, absl::StatusCode code, absl::string_view message) {
  const auto file = SafetensorsFile::FromBytes(bytes, "bad.safetensors");
  CAPTURE(file.status().ToString());
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == code);
  CHECK(absl::StrContains(file.status().message(), "bad.safetensors"));
  CHECK(absl::StrContains(file.status().message(), message));
}

TEST_CASE("safetensors round trip keeps names, shapes, bytes and metadata", "[unit][safetensors]") {
  TempDir dir;
  const fs::path path = dir.path / "model.safetensors";
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  const std::vector<float> b = {0.5f, -1.0f, 7.0f};
  const std::vector<float> s = {42.0f};
  const std::vector<float> none;
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  REQUIRE(WriteSafetensors(path.string(),
                           {{"rnn.weight_ih_l0", {2, 3}, w},
                            {"rnn.bias_ih_l0", {3}, b},
                            {"scale", {}, s},
                            {"empty", {0, 4}, none}},
                           metadata)
              .ok());

  const std::string raw = ReadWholeFile(path);
  REQUIRE(raw.size() >= 8);
  uint64_t header_size = 0;
  std::memcpy(&header_size, raw.data(), 8);
  CHECK(header_size % 8 == 0);
  REQUIRE(raw.size() == 8 + header_size + (w.size() + b.size() + s.size()) * sizeof(float));
  const std::string header = raw.substr(8, header_size);
  CHECK(header.front() == '{');
  const size_t last = header.find_last_not_of(' ');
  CHECK(header[last] == '}');
  CHECK(header.size() - last - 1 < 8);  // only the padding follows the JSON
  CHECK(absl::StrContains(header, R"("__metadata__":{"format":"pt","step":"12"})"));

  auto file = SafetensorsFile::Read(path.string());
  REQUIRE(file.ok());
  CHECK(file->source() == path.string());
  CHECK(file->metadata() == metadata);
  REQUIRE(file->tensors().size() == 4);
  const TensorInfo& wi = file->tensors().at("rnn.weight_ih_l0");
  CHECK(wi.dtype == Dtype::kF32);
  CHECK(wi.shape == std::vector<int64_t>{2, 3});
  CHECK(wi.numel == 6);
  CHECK(BytesOf(wi.data) == F32Bytes(w));
  // Offsets follow the order the tensors were given.
  CHECK(wi.data_begin == 0);
  CHECK(wi.data_end == 24);
  CHECK(file->tensors().at("rnn.bias_ih_l0").data_begin == 24);
  CHECK(file->tensors().at("scale").shape.empty());
  CHECK(file->tensors().at("scale").data_begin == 36);
  CHECK(file->tensors().at("empty").shape == std::vector<int64_t>{0, 4});
  CHECK(file->tensors().at("empty").data.empty());

  const auto read_w = file->ReadF32("rnn.weight_ih_l0", {2, 3});
  REQUIRE(read_w.ok());
  CHECK(F32Bytes(*read_w) == F32Bytes(w));  // bitwise, so -0.0 and denormals count
  const auto read_s = file->ReadF32("scale", {});
  REQUIRE(read_s.ok());
  CHECK(*read_s == s);
  std::vector<float> into(3);
  REQUIRE(file->CopyF32("rnn.bias_ih_l0", {3}, absl::MakeSpan(into)).ok());
  CHECK(into == b);

  // Spans stay valid when the file object moves.
  SafetensorsFile moved = *std::move(file);
  CHECK(BytesOf(moved.tensors().at("rnn.weight_ih_l0").data) == F32Bytes(w));
}

// Laid out by hand exactly as `safetensors.numpy.save` (0.8) writes
// {"weight": [[1,2,3],[4,5,6]], "bias": [0.5,-1]} (float32) with metadata {"format": "pt"}:
// compact JSON, "__metadata__" first, then tensors by dtype alignment and name.
const char kPythonHeader[] =
    R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
    R"("weight":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}})";

TEST_CASE("safetensors bytes match the Python library's", "[unit][safetensors]") {
  const std::vector<float> bias = {0.5f, -1.0f};
  const std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  const std::string expected = MakeFile(kPythonHeader, F32Bytes(bias) + F32Bytes(weight));
  REQUIRE(expected.size() == 8 + 152 + 32);  // what Python's file measures
  REQUIRE(expected.substr(0, 8) == std::string("\x98\0\0\0\0\0\0\0", 8));

  const auto written =
      SerializeSafetensors({{"bias", {2}, bias}, {"weight", {2, 3}, weight}}, {{"format", "pt"}});
  REQUIRE(written.ok());
  CHECK(*written == expected);

  const auto file = SafetensorsFile::FromBytes(expected, "python.safetensors");
  REQUIRE(file.ok());
  CHECK(file->metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  const auto w = file->ReadF32("weight", {2, 3});
  REQUIRE(w.ok());
  CHECK(*w == weight);
  const auto b = file->ReadF32("bias", {2});
  REQUIRE(b.ok());
  CHECK(*b == bias);
}

TEST_CASE("safetensors escapes metadata strings as the Python library does",
          "[unit][safetensors]") {
  // Python: save({... as above ...}, metadata={"note": "a\"b\\c\nd\u00e9\x01/\x7f\t"}).
  const std::string note = "a\"b\\c\nd\xc3\xa9\x01/\x7f\t";
  const std::string header =
      "{\"__metadata__\":{\"note\":\"a\\\"b\\\\c\\nd\xc3\xa9\\u0001/\x7f\\t\"},"
      R"("bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("weight":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}})";
  const std::vector<float> bias = {0.5f, -1.0f};
  const std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  const std::string expected = MakeFile(header, F32Bytes(bias) + F32Bytes(weight));
  REQUIRE(expected.size() == 8 + 168 + 32);

  const auto written =
      SerializeSafetensors({{"bias", {2}, bias}, {"weight", {2, 3}, weight}}, {{"note", note}});
  REQUIRE(written.ok());
  CHECK(*written == expected);
  const auto file = SafetensorsFile::FromBytes(expected);
  REQUIRE(file.ok());
  CHECK(file->metadata().at("note") == note);
}

TEST_CASE("safetensors reads other dtypes from a Python-written file", "[unit][safetensors]") {
  // Python: {"step": int64 7, "bias": f32 [0.5,-1], "h": f16 [1,-2]}, no metadata; the I64
  // leads (8-byte alignment), the F16 trails.
  const std::string header = R"({"step":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                             R"("bias":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("h":{"dtype":"F16","shape":[2],"data_offsets":[16,20]}})";
  const std::string data = std::string("\x07\0\0\0\0\0\0\0", 8) + F32Bytes({0.5f, -1.0f}) +
                           std::string("\x00\x3c\x00\xc0", 4);
  const auto file = SafetensorsFile::FromBytes(MakeFile(header, data), "mixed.safetensors");
  REQUIRE(file.ok());
  CHECK(file->metadata().empty());
  const TensorInfo& step = file->tensors().at("step");
  CHECK(step.dtype == Dtype::kI64);
  CHECK(step.shape.empty());
  int64_t step_value = 0;
  std::memcpy(&step_value, step.data.data(), 8);
  CHECK(step_value == 7);
  const TensorInfo& h = file->tensors().at("h");
  CHECK(h.dtype == Dtype::kF16);
  CHECK(BytesOf(h.data) == std::string("\x00\x3c\x00\xc0", 4));

  const auto wrong = file->ReadF32("h", {2});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(wrong.status().message(), R"(tensor "h" is F16, expected F32)"));
  CHECK(absl::StrContains(wrong.status().message(), "mixed.safetensors"));
}

TEST_CASE("safetensors accessors name a missing tensor and both shapes", "[unit][safetensors]") {
  const auto bytes = SerializeSafetensors({{"w", {2, 3}, std::vector<float>(6, 1.0f)}}, {});
  REQUIRE(bytes.ok());
  const auto file = SafetensorsFile::FromBytes(*bytes, "m.safetensors");
  REQUIRE(file.ok());

  const auto missing = file->ReadF32("rnn.weight_hh_l0", {2, 3});
  REQUIRE(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(missing.status().message(), R"(no tensor named "rnn.weight_hh_l0")"));
  CHECK(absl::StrContains(missing.status().message(), "m.safetensors"));
  CHECK(file->Find("nope").status().code() == absl::StatusCode::kNotFound);

  const auto misshapen = file->ReadF32("w", {3, 2});
  REQUIRE(misshapen.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(misshapen.status().message(),
                          R"(tensor "w" has shape [2, 3], expected [3, 2])"));
  CHECK(file->ReadF32("w", {6}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(file->ReadF32("w", {2, 3, 1}).status().code() == absl::StatusCode::kInvalidArgument);

  std::vector<float> small(5, -1.0f);
  const absl::Status status = file->CopyF32("w", {2, 3}, absl::MakeSpan(small));
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(small == std::vector<float>(5, -1.0f));
}

TEST_CASE("safetensors accepts an empty file and zero-sized tensors", "[unit][safetensors]") {
  const auto empty = SafetensorsFile::FromBytes(MakeFile("{}", ""));
  REQUIRE(empty.ok());
  CHECK(empty->tensors().empty());
  // Zero-sized tensors may sit anywhere, including where another one starts.
  const auto zeros = SafetensorsFile::FromBytes(
      MakeFile(absl::StrCat(R"({"a":)", Entry(0, 0, 0), R"(,"b":)", Entry(2, 0, 8), R"(,"c":)",
                            Entry(0, 8, 8), "}"),
               F32Bytes({1, 2})));
  REQUIRE(zeros.ok());
  CHECK(zeros->tensors().size() == 3);
}

TEST_CASE("safetensors rejects each kind of malformed file", "[unit][safetensors]") {
  using Code = absl::StatusCode;
  const std::string two = F32Bytes({1, 2});  // 8 bytes for one [2] F32 tensor
  auto one = [&](absl::string_view entry_json, const std::string& data) {
    return MakeFile(absl::StrCat(R"({"a":)", entry_json, "}"), data);
  };

  SECTION("shorter than 8 bytes") {
    RequireError(std::string("\x10\0\0", 3), Code::kDataLoss,
                 "3 bytes, shorter than the 8-byte header length");
    RequireError("", Code::kDataLoss, "shorter than the 8-byte header length");
  }
  SECTION("header length absurdly large") {
    RequireError(Le64(uint64_t{1} << 40) + "{}", Code::kInvalidArgument,
                 "header length 1099511627776 is over the limit of 100000000 bytes");
    RequireError(Le64(~uint64_t{0}) + "{}", Code::kInvalidArgument, "over the limit");
  }
  SECTION("header length past the end of the file") {
    RequireError(Le64(16) + "{}", Code::kDataLoss,
                 "header length 16 runs past the end of the file (2 bytes after the length)");
  }
  SECTION("header not JSON") {
    RequireError(MakeFile(R"({"a":)", ""), Code::kInvalidArgument, "header is not valid JSON");
    RequireError(MakeFile(R"({"a":NaN})", ""), Code::kInvalidArgument, "header is not valid JSON");
    RequireError(Le64(0), Code::kInvalidArgument, "header is not a JSON object");
    RequireError(MakeFile("{\"\xff\":1}", ""), Code::kInvalidArgument, "not valid UTF-8");
  }
  SECTION("header not an object") {
    RequireError(MakeFile("[1,2]", ""), Code::kInvalidArgument, "header is not a JSON object");
    RequireError(MakeFile(R"("weights")", ""), Code::kInvalidArgument,
                 "header is not a JSON object");
  }
  SECTION("header nested absurdly deep") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    RequireError(MakeFile(absl::StrCat(R"({"a":)", deep, "}"), ""), Code::kInvalidArgument,
                 "nests deeper than");
  }
  SECTION("entry not an object") {
    RequireError(one("5", ""), Code::kInvalidArgument, R"(tensor "a": entry is not a JSON object)");
  }
  SECTION("entry missing dtype, shape or data_offsets") {
    RequireError(one(R"({"shape":[2],"data_offsets":[0,8]})", two), Code::kInvalidArgument,
                 R"(tensor "a": entry has no "dtype")");
    RequireError(one(R"({"dtype":"F32","data_offsets":[0,8]})", two), Code::kInvalidArgument,
                 R"(entry has no "shape")");
    RequireError(one(R"({"dtype":"F32","shape":[2]})", two), Code::kInvalidArgument,
                 R"(entry has no "data_offsets")");
  }
  SECTION("entry fields of the wrong JSON type") {
    RequireError(one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})", two),
                 Code::kInvalidArgument, R"("dtype" is not a string)");
    RequireError(one(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})", two),
                 Code::kInvalidArgument, R"("shape" is not an array)");
    RequireError(one(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})", two),
                 Code::kInvalidArgument, "shape[0] is not a number");
    RequireError(one(R"({"dtype":"F32","shape":[2],"data_offsets":{"begin":0}})", two),
                 Code::kInvalidArgument, R"("data_offsets" is not an array [begin, end])");
    RequireError(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,"8"]})", two),
                 Code::kInvalidArgument, "data_offsets[1] is not a number");
  }
  SECTION("unknown dtype") {
    RequireError(one(Entry(2, 0, 8, "F17"), two), Code::kInvalidArgument,
                 R"(unknown or unsupported dtype "F17")");
    RequireError(one(Entry(2, 0, 8, "f32"), two), Code::kInvalidArgument, R"(dtype "f32")");
    RequireError(one(Entry(2, 0, 8, "F4"), two), Code::kInvalidArgument, R"(dtype "F4")");
  }
  SECTION("negative or fractional dims") {
    RequireError(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", two),
                 Code::kInvalidArgument, "shape[0] is negative (-2)");
    RequireError(one(R"({"dtype":"F32","shape":[2,1.5],"data_offsets":[0,8]})", two),
                 Code::kInvalidArgument, "shape[1] is 1.5, not an integer");
    RequireError(one(R"({"dtype":"F32","shape":[1e16],"data_offsets":[0,8]})", two),
                 Code::kInvalidArgument, "shape[0] is 1e+16, above 2^53");
  }
  SECTION("shape product overflow") {
    RequireError(
        one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})", two),
        Code::kInvalidArgument, "overflows 64 bits");
    // 2^62 elements fit; 2^64 bytes of them do not.
    RequireError(
        one(R"({"dtype":"F32","shape":[1125899906842624,4096],"data_offsets":[0,8]})", two),
        Code::kInvalidArgument, "overflows 64 bits in bytes");
  }
  SECTION("data_offsets not two non-decreasing integers") {
    RequireError(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", two),
                 Code::kInvalidArgument, R"("data_offsets" is not an array [begin, end])");
    RequireError(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})", two),
                 Code::kInvalidArgument, R"("data_offsets" is not an array [begin, end])");
    RequireError(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.5]})", two),
                 Code::kInvalidArgument, "data_offsets[1] is 8.5, not an integer");
    RequireError(one(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})", two),
                 Code::kInvalidArgument, "data_offsets[0] is negative");
    RequireError(one(Entry(0, 8, 4), two), Code::kInvalidArgument,
                 "data_offsets [8, 4] end before they begin");
  }
  SECTION("end beyond the data buffer") {
    RequireError(one(Entry(4, 0, 16), two), Code::kDataLoss,
                 "data_offsets [0, 16] run past the end of the 8-byte data buffer");
  }
  SECTION("byte length differs from shape times dtype size") {
    RequireError(one(Entry(2, 0, 4), F32Bytes({1})), Code::kInvalidArgument,
                 "shape [2] of F32 needs 8 bytes but data_offsets [0, 4] hold 4");
    RequireError(one(Entry(2, 0, 8, "F64"), two), Code::kInvalidArgument,
                 "shape [2] of F64 needs 16 bytes");
  }
  SECTION("overlapping tensors") {
    RequireError(
        MakeFile(absl::StrCat(R"({"a":)", Entry(2, 0, 8), R"(,"b":)", Entry(2, 4, 12), "}"),
                 F32Bytes({1, 2, 3})),
        Code::kInvalidArgument,
        R"(tensor "b" at data_offsets [4, 12] overlaps tensor "a", which ends at 8)");
    // Two names for the same bytes.
    RequireError(
        MakeFile(absl::StrCat(R"({"a":)", Entry(2, 0, 8), R"(,"b":)", Entry(2, 0, 8), "}"), two),
        Code::kInvalidArgument, "overlaps tensor");
  }
  SECTION("holes and trailing bytes in the data buffer") {
    RequireError(
        MakeFile(absl::StrCat(R"({"a":)", Entry(2, 0, 8), R"(,"b":)", Entry(2, 12, 20), "}"),
                 F32Bytes({1, 2, 3, 4, 5})),
        Code::kInvalidArgument, "hole in the data buffer: bytes [8, 12) belong to no");
    RequireError(one(Entry(2, 4, 12), F32Bytes({0, 1, 2})), Code::kInvalidArgument,
                 "bytes [0, 4) belong to no tensor");
    RequireError(one(Entry(2, 0, 8), F32Bytes({1, 2, 3})), Code::kInvalidArgument,
                 "the data buffer has 12 bytes but the tensors cover only 8 (trailing bytes)");
    RequireError(MakeFile("{}", "junk"), Code::kInvalidArgument, "cover only 0");
  }
  SECTION("duplicate names") {
    RequireError(
        MakeFile(absl::StrCat(R"({"a":)", Entry(2, 0, 8), R"(,"a":)", Entry(2, 8, 16), "}"),
                 F32Bytes({1, 2, 3, 4})),
        Code::kInvalidArgument, R"(duplicate tensor name "a")");
    // The same name spelt with an escape: protobuf's parser catches it.
    RequireError(
        MakeFile(absl::StrCat(R"({"a":)", Entry(2, 0, 8), R"(,"\u0061":)", Entry(2, 8, 16), "}"),
                 F32Bytes({1, 2, 3, 4})),
        Code::kInvalidArgument, "Repeated map key");
  }
  SECTION("__metadata__ not an object of strings") {
    RequireError(MakeFile(R"({"__metadata__":"pt"})", ""), Code::kInvalidArgument,
                 R"("__metadata__" is not a JSON object)");
    RequireError(MakeFile(R"({"__metadata__":{"format":"pt","epoch":3}})", ""),
                 Code::kInvalidArgument, R"("__metadata__" value for "epoch" is not a string)");
    RequireError(MakeFile(R"({"__metadata__":{"a":{"b":"c"}}})", ""), Code::kInvalidArgument,
                 R"(value for "a" is not a string)");
  }
}

TEST_CASE("safetensors survives every truncation and byte flip of a file", "[unit][safetensors]") {
  const auto good = SerializeSafetensors(
      {{"w", {2, 3}, std::vector<float>(6, 1.0f)}, {"b", {3}, std::vector<float>(3, 2.0f)}},
      {{"format", "pt"}});
  REQUIRE(good.ok());
  int rejected = 0;
  for (size_t n = 0; n < good->size(); ++n) {
    rejected += !SafetensorsFile::FromBytes(good->substr(0, n)).ok();
  }
  CHECK(rejected == static_cast<int>(good->size()));  // every proper prefix is invalid
  for (size_t i = 0; i < good->size(); ++i) {
    for (const unsigned char flip : {0x01, 0x20, 0x80, 0xFF}) {
      std::string bytes = *good;
      bytes[i] = static_cast<char>(bytes[i] ^ flip);
      const auto file = SafetensorsFile::FromBytes(std::move(bytes), "flipped");
      if (!file.ok()) {
        CHECK(absl::StrContains(file.status().message(), "flipped"));
        continue;
      }
      // Whatever was accepted is consistent with its own header.
      for (const auto& [name, info] : file->tensors()) {
        CHECK(static_cast<int64_t>(info.data.size()) == info.numel * DtypeSizeBytes(info.dtype));
      }
    }
  }
}

TEST_CASE("safetensors writes atomically and replaces an existing file", "[unit][safetensors]") {
  TempDir dir;
  const fs::path path = dir.path / "model.safetensors";
  {
    std::ofstream old(path, std::ios::binary);
    old << "an older, longer file that is not safetensors at all";
  }
  const std::vector<float> v1 = {1, 2};
  REQUIRE(WriteSafetensors(path.string(), {{"x", {2}, v1}}, {}).ok());
  CHECK(dir.Entries() == std::vector<std::string>{"model.safetensors"});
  auto file = SafetensorsFile::Read(path.string());
  REQUIRE(file.ok());
  CHECK(*file->ReadF32("x", {2}) == v1);
  CHECK((fs::status(path).permissions() & fs::perms::others_all) == fs::perms::none);

  const std::vector<float> v2 = {3, 4, 5};
  REQUIRE(WriteSafetensors(path.string(), {{"y", {3}, v2}}, {{"k", "v"}}).ok());
  CHECK(dir.Entries() == std::vector<std::string>{"model.safetensors"});
  file = SafetensorsFile::Read(path.string());
  REQUIRE(file.ok());
  CHECK(file->tensors().count("x") == 0);
  CHECK(*file->ReadF32("y", {3}) == v2);

  // A write refused for its arguments leaves the old file and no temp file.
  const absl::Status bad = WriteSafetensors(path.string(), {{"z", {4}, v2}}, {});
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(dir.Entries() == std::vector<std::string>{"model.safetensors"});
  CHECK(SafetensorsFile::Read(path.string()).ok());

  // A write that fails at the rename (the target is a directory) removes its temp file.
  fs::create_directory(dir.path / "taken");
  CHECK_FALSE(WriteSafetensors((dir.path / "taken").string(), {{"y", {3}, v2}}, {}).ok());
  CHECK(dir.Entries().size() == 2);

  const absl::Status no_dir =
      WriteSafetensors((dir.path / "missing" / "m.safetensors").string(), {{"y", {3}, v2}}, {});
  CHECK(no_dir.code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(no_dir.message(), "missing"));
}

TEST_CASE("safetensors writer refuses what a reader would not load", "[unit][safetensors]") {
  const std::vector<float> v = {1, 2, 3, 4};
  auto code_of = [](const std::vector<NamedTensor>& tensors,
                    const std::map<std::string, std::string>& metadata = {}) {
    return SerializeSafetensors(tensors, metadata).status().code();
  };
  using Code = absl::StatusCode;
  CHECK(code_of({{"x", {2, 2}, v}}) == Code::kOk);
  CHECK(code_of({{"x", {3}, v}}) == Code::kInvalidArgument);
  CHECK(code_of({{"x", {-1, -4}, v}}) == Code::kInvalidArgument);
  CHECK(code_of({{"x", {4}, v}, {"x", {4}, v}}) == Code::kInvalidArgument);
  CHECK(code_of({{"", {4}, v}}) == Code::kInvalidArgument);
  CHECK(code_of({{"__metadata__", {4}, v}}) == Code::kInvalidArgument);
  CHECK(code_of({{"bad\xff", {4}, v}}) == Code::kInvalidArgument);
  CHECK(code_of({{"x", {4}, v}}, {{"k", "\xc0\x80"}}) == Code::kInvalidArgument);
  const auto status = SerializeSafetensors({{"x", {3}, v}}, {}).status();
  CHECK(absl::StrContains(status.message(), R"("x": shape [3] has 3 elements but 4 floats)"));
}

TEST_CASE("safetensors Read names a missing path and refuses a directory", "[unit][safetensors]") {
  TempDir dir;
  const std::string missing = (dir.path / "nope.safetensors").string();
  const auto a = SafetensorsFile::Read(missing);
  REQUIRE(a.status().code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(a.status().message(), missing));

  const auto b = SafetensorsFile::Read(dir.path.string());
  REQUIRE(b.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(b.status().message(), "is a directory"));
  CHECK(absl::StrContains(b.status().message(), dir.path.string()));

  // A file cut short on disk reads as data loss.
  const std::string path = (dir.path / "cut.safetensors").string();
  REQUIRE(WriteSafetensors(path, {{"x", {4}, std::vector<float>{1, 2, 3, 4}}}, {}).ok());
  fs::resize_file(path, fs::file_size(path) - 4);
  const auto c = SafetensorsFile::Read(path);
  REQUIRE(c.status().code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(c.status().message(), "cut.safetensors"));
  CHECK(absl::StrContains(c.status().message(), "run past the end of the 12-byte data buffer"));
}

}  // namespace
}  // namespace forecastd
