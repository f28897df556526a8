// The output of forecastctl's list commands (`models list`, `jobs list`, `streams`):
//   -o table  the default: the columns an operator reads first, long text cut short;
//   -o wide   every column, nothing cut;
//   -o json   the RPC's response as ProtoJson prints it (--json is -o json);
//   -o csv    every column with plain values (integers, seconds, bytes and times as numbers
//             or RFC 3339, "" for none), one header line;
// and --watch, which lists again every --interval seconds until Ctrl-C (then exits 0): on a
// terminal a table is redrawn in place under the time of the listing; otherwise a listing is
// printed only when it changed (a table after a "# <time>" line, JSON as one line per
// listing, CSV as the rows that are new or changed, under one header).
// Main thread only.
#ifndef FORECASTD_CLIENT_FORECASTCTL_LIST_VIEW_H_
#define FORECASTD_CLIENT_FORECASTCTL_LIST_VIEW_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "client/forecastctl/command.h"
#include "google/protobuf/message.h"

namespace forecastd::ctl {

struct ListFlags {
  std::string output = "table";  // table, wide, json or csv
  bool watch = false;
  double interval_seconds = 2.0;
};

// Adds -o/--output, -w/--watch and --interval to a list command.
void AddListFlags(CLI::App& command, ListFlags& flags);

// One cell: what a table shows, and the plain value CSV writes (the same unless given).
struct ListCell {
  ListCell(std::string both) : text(both), plain(std::move(both)) {}  // NOLINT: implicit
  ListCell(const char* both) : ListCell(std::string(both)) {}         // NOLINT: implicit
  ListCell(std::string shown, std::string value)
      : text(std::move(shown)), plain(std::move(value)) {}
  std::string text;
  std::string plain;
};

// A time: "2026-11-26 23:40:01" (UTC) in a table, RFC 3339 in CSV; "-" and "" for 0 (unset).
ListCell TimeCell(int64_t unix_ms);

struct ListColumn {
  std::string header;
  bool wide_only = false;  // shown by -o wide and csv, not by the default table
  size_t table_chars = 0;  // the default table cuts its cells to this many characters (0: not)
};

// The rows of one listing.
class ListTable {
 public:
  explicit ListTable(std::vector<ListColumn> columns);
  // One cell per column.
  void AddRow(std::vector<ListCell> cells);
  bool empty() const { return rows_.empty(); }
  // "table" or "wide": aligned text; "csv": CSV with a header line.
  std::string Render(const std::string& format) const;
  // The CSV lines of the rows, without the header.
  std::vector<std::string> CsvRows() const;
  std::string CsvHeader() const;

 private:
  std::vector<ListColumn> columns_;
  std::vector<std::vector<ListCell>> rows_;
};

// What a list command fetched: the response (for -o json), its rows, and the line printed
// instead of an empty table ("no models in the repository").
struct Listing {
  std::unique_ptr<google::protobuf::Message> response;
  ListTable table;
  std::string when_empty;
};

// Fetches and prints the listing once, or under --watch until Ctrl-C. Returns the exit code:
// 0, or 1 when the first fetch fails (a later failure is reported and the watch goes on).
// --json among the global flags means -o json.
int RunList(Context& context, const ListFlags& flags,
            const std::function<absl::StatusOr<Listing>(ForecastdClient&)>& fetch);

}  // namespace forecastd::ctl

#endif  // FORECASTD_CLIENT_FORECASTCTL_LIST_VIEW_H_
