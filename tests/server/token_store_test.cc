// TokenStore (server/token_store.h): the token file's format and its errors (which name the
// line, never its text), authentication against the digests, the constant-time comparison's
// results, file permissions, and a reload that keeps the old tokens when the new file is bad.
#include "server/token_store.h"

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"

namespace forecastd {
namespace {

using ::forecastd::testing::TempDir;

constexpr char kPredictToken[] = "p-0123456789abcdef";
constexpr char kTrainToken[] = "t-0123456789abcdef";
constexpr char kAllToken[] = "a-0123456789abcdef";

void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  REQUIRE(out.good());
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

TEST_CASE("Token files: roles, optional names, comments and blank lines", "[unit][auth]") {
  const absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(
      absl::StrCat("# forecastd tokens\n\n", "predict ", kPredictToken, " dashboards\n",
                   "  train\t", kTrainToken, "\r\n", "predict,train,admin ", kAllToken, " ops-1\n",
                   "   # indented comment\n"));
  INFO(entries.status().ToString());
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 3);
  const TokenIdentity& p = (*entries)[0].identity;
  REQUIRE(p.name == "dashboards");
  REQUIRE(p.roles.Has(Role::kPredict));
  REQUIRE_FALSE(p.roles.Has(Role::kTrain));
  REQUIRE_FALSE(p.roles.Has(Role::kAdmin));
  const TokenIdentity& t = (*entries)[1].identity;
  REQUIRE(t.name == "line 4");  // no name: the line
  REQUIRE(t.roles.Has(Role::kTrain));
  REQUIRE_FALSE(t.roles.Has(Role::kPredict));
  const TokenIdentity& a = (*entries)[2].identity;
  REQUIRE(a.roles.Has(Role::kPredict));
  REQUIRE(a.roles.Has(Role::kTrain));
  REQUIRE(a.roles.Has(Role::kAdmin));
  REQUIRE(DigestsEqual((*entries)[0].digest, DigestToken(kPredictToken)));

  const absl::StatusOr<std::vector<TokenEntry>> empty = ParseTokenFile("# nobody yet\n\n");
  REQUIRE(empty.ok());
  REQUIRE(empty->empty());
}

TEST_CASE("Token file errors name the line and never echo a token", "[unit][auth]") {
  const std::string secret = "s3cr3t-0123456789abcdef";
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"predict\n", "line 1: expected '<roles> <token> [name]'"},
      {absl::StrCat("\npredict ", secret, " name extra\n"), "line 2: expected"},
      {absl::StrCat("root ", secret, "\n"),
       "line 1: unknown role (expected predict, train or admin)"},
      {absl::StrCat("predict, ", secret, "\n"), "line 1: unknown role"},
      {absl::StrCat(secret, " predict\n"), "line 1: unknown role"},  // fields swapped
      {"predict short\n", "line 1: a token has 16 to 1024 characters"},
      {absl::StrCat("predict ", std::string(1025, 'x'), "\n"), "a token has 16 to 1024"},
      {absl::StrCat("predict ", secret, "\xff\n"), "printable ASCII"},
      {absl::StrCat("predict ", secret, " bad/name\n"), "line 1: a name has letters"},
      {absl::StrCat("predict ", secret, " a\ntrain ", secret, " b\n"),
       "line 2: the token of a appears again"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(c.text);
    CAPTURE(c.text, entries.status().ToString());
    REQUIRE_FALSE(entries.ok());
    REQUIRE(entries.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(entries.status().message().find(c.expected) != absl::string_view::npos);
    REQUIRE(entries.status().message().find(secret) == absl::string_view::npos);
  }
}

TEST_CASE("The digest comparison is exact whatever differs and where", "[unit][auth]") {
  const std::string token = "0123456789abcdef0123456789abcdef";
  REQUIRE(DigestsEqual(DigestToken(token), DigestToken(token)));
  for (size_t i = 0; i < token.size(); ++i) {
    std::string other = token;
    other[i] ^= 1;  // one bit, anywhere: first byte, middle, last
    CAPTURE(i);
    REQUIRE_FALSE(DigestsEqual(DigestToken(token), DigestToken(other)));
  }
  REQUIRE_FALSE(DigestsEqual(DigestToken(token), DigestToken(token + "0")));
  REQUIRE_FALSE(DigestsEqual(DigestToken(token), DigestToken(token.substr(0, 31))));
  REQUIRE_FALSE(DigestsEqual(DigestToken(token), DigestToken("")));
  TokenDigest a{}, b{};
  b.back() = 1;
  REQUIRE_FALSE(DigestsEqual(a, b));
  b.back() = 0;
  b.front() = 0x80;
  REQUIRE_FALSE(DigestsEqual(a, b));
}

TEST_CASE("Authenticate finds the token's roles and nothing for anything else", "[unit][auth]") {
  TempDir dir;
  const std::string path = dir.path() + "/tokens";
  WriteFile(path, absl::StrCat("predict ", kPredictToken, " p\ntrain,admin ", kAllToken, " a\n"));
  absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Create({.path = path});
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  REQUIRE((*store)->size() == 2);

  std::optional<TokenIdentity> p = (*store)->Authenticate(kPredictToken);
  REQUIRE(p.has_value());
  REQUIRE(p->name == "p");
  REQUIRE(p->roles.Has(Role::kPredict));
  std::optional<TokenIdentity> a = (*store)->Authenticate(kAllToken);
  REQUIRE(a.has_value());
  REQUIRE(a->name == "a");
  REQUIRE(a->roles.Has(Role::kAdmin));
  REQUIRE_FALSE(a->roles.Has(Role::kPredict));

  for (const std::string& wrong :
       {std::string(""), std::string(kTrainToken), std::string(kPredictToken).substr(0, 17),
        std::string(kPredictToken) + "x", std::string(" ") + kPredictToken}) {
    CAPTURE(wrong);
    REQUIRE_FALSE((*store)->Authenticate(wrong).has_value());
  }
}

TEST_CASE("Bearer headers: the scheme in any case, one token", "[unit][auth]") {
  REQUIRE(*BearerToken("Bearer abc") == "abc");
  REQUIRE(*BearerToken("bearer abc") == "abc");
  REQUIRE(*BearerToken("BEARER   abc  ") == "abc");
  REQUIRE_FALSE(BearerToken("Basic YWxhZGRpbjpvcGVuc2VzYW1l").ok());
  REQUIRE_FALSE(BearerToken("Bearer").ok());
  REQUIRE_FALSE(BearerToken("Bearer    ").ok());
  REQUIRE_FALSE(BearerToken("abc").ok());
}

TEST_CASE("Token files other users may read are refused, missing files are NOT_FOUND",
          "[unit][auth]") {
  TempDir dir;
  const std::string path = dir.path() + "/tokens";
  WriteFile(path, absl::StrCat("predict ", kPredictToken, "\n"), 0644);
  absl::StatusOr<std::unique_ptr<TokenStore>> store = TokenStore::Create({.path = path});
  REQUIRE(store.status().code() == absl::StatusCode::kPermissionDenied);
  CAPTURE(store.status().message());
  REQUIRE(store.status().message().find("mode 0644") != absl::string_view::npos);
  REQUIRE(store.status().message().find("chmod 600") != absl::string_view::npos);

  REQUIRE(chmod(path.c_str(), 0640) == 0);  // group-readable, as Kubernetes' fsGroup makes it
  REQUIRE(TokenStore::Create({.path = path}).ok());

  store = TokenStore::Create({.path = dir.path() + "/missing"});
  REQUIRE(store.status().code() == absl::StatusCode::kNotFound);
  REQUIRE(store.status().message().find("/missing") != absl::string_view::npos);
  REQUIRE(TokenStore::Create({.path = dir.path()}).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Reload replaces the tokens, and keeps them when the new file is bad", "[unit][auth]") {
  TempDir dir;
  const std::string path = dir.path() + "/tokens";
  WriteFile(path, absl::StrCat("predict ", kPredictToken, "\n"));
  absl::StatusOr<std::unique_ptr<TokenStore>> created = TokenStore::Create({.path = path});
  REQUIRE(created.ok());
  TokenStore& store = **created;

  WriteFile(path, absl::StrCat("train ", kTrainToken, "\n"));
  REQUIRE(store.Reload().ok());
  REQUIRE_FALSE(store.Authenticate(kPredictToken).has_value());
  REQUIRE(store.Authenticate(kTrainToken).has_value());

  WriteFile(path, absl::StrCat("train ", kTrainToken, "\nsuperuser ", kAllToken, "\n"));
  const absl::Status bad = store.Reload();
  REQUIRE(bad.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(bad.message().find("line 2") != absl::string_view::npos);
  REQUIRE(bad.message().find(kAllToken) == absl::string_view::npos);
  REQUIRE(store.Authenticate(kTrainToken).has_value());
  REQUIRE_FALSE(store.Authenticate(kAllToken).has_value());

  WriteFile(path, absl::StrCat("admin ", kAllToken, "\n"), 0666);
  REQUIRE(store.Reload().code() == absl::StatusCode::kPermissionDenied);
  REQUIRE(store.Authenticate(kTrainToken).has_value());

  WriteFile(path, "# everyone revoked\n");
  REQUIRE(store.Reload().ok());
  REQUIRE(store.size() == 0);
  REQUIRE_FALSE(store.Authenticate(kTrainToken).has_value());
}

}  // namespace
}  // namespace forecastd
