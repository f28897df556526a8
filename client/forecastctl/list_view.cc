#include "client/forecastctl/list_view.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/forecastctl/interrupt.h"
#include "client/forecastctl/output.h"

namespace forecastd::ctl {

void AddListFlags(CLI::App& command, ListFlags& flags) {
  command
      .add_option("--output,-o", flags.output,
                  "table, wide (every column, nothing cut), json or csv (--json = -o json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "wide", "json", "csv"}));
  command.add_flag("--watch,-w", flags.watch,
                   "list again every --interval seconds until Ctrl-C, printing what changed");
  command.add_option("--interval", flags.interval_seconds, "seconds between listings with --watch")
      ->capture_default_str()
      ->check(Between(0.1, 3600));
}

ListCell TimeCell(int64_t unix_ms) {
  if (unix_ms <= 0) return ListCell("-", "");
  const absl::Time t = absl::FromUnixMillis(unix_ms);
  return ListCell(absl::FormatTime("%Y-%m-%d %H:%M:%S", t, absl::UTCTimeZone()),
                  absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone()));
}

ListTable::ListTable(std::vector<ListColumn> columns) : columns_(std::move(columns)) {}

void ListTable::AddRow(std::vector<ListCell> cells) {
  cells.resize(columns_.size(), ListCell(""));
  rows_.push_back(std::move(cells));
}

std::string ListTable::CsvHeader() const {
  std::vector<std::string> fields;
  for (const ListColumn& c : columns_) fields.push_back(CsvField(c.header));
  return absl::StrJoin(fields, ",");
}

std::vector<std::string> ListTable::CsvRows() const {
  std::vector<std::string> lines;
  for (const auto& row : rows_) {
    std::vector<std::string> fields;
    for (const ListCell& cell : row) fields.push_back(CsvField(cell.plain));
    lines.push_back(absl::StrJoin(fields, ","));
  }
  return lines;
}

std::string ListTable::Render(const std::string& format) const {
  if (format == "csv") {
    std::string out = CsvHeader() + "\n";
    for (const std::string& line : CsvRows()) absl::StrAppend(&out, line, "\n");
    return out;
  }
  const bool wide = format == "wide";
  std::vector<std::string> headers;
  for (const ListColumn& c : columns_) {
    if (wide || !c.wide_only) headers.push_back(c.header);
  }
  TextTable table(std::move(headers));
  for (const auto& row : rows_) {
    std::vector<std::string> cells;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const ListColumn& column = columns_[c];
      if (wide) {
        cells.push_back(Truncate(row[c].text, std::string::npos));  // one line each
      } else if (!column.wide_only) {
        cells.push_back(column.table_chars > 0 ? Truncate(row[c].text, column.table_chars)
                                               : row[c].text);
      }
    }
    table.AddRow(std::move(cells));
  }
  return table.Render();
}

namespace {

// The listing in `format`, as printed without --watch.
std::string Render(const Listing& listing, const std::string& format, bool one_line_json) {
  if (format == "json") return ProtoJson(*listing.response, one_line_json) + "\n";
  if (format != "csv" && listing.table.empty()) return listing.when_empty + "\n";
  return listing.table.Render(format);
}

std::string Now() { return TimeCell(absl::ToUnixMillis(absl::Now())).text + " UTC"; }

}  // namespace

int RunList(Context& context, const ListFlags& flags,
            const std::function<absl::StatusOr<Listing>(ForecastdClient&)>& fetch) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  const std::string format = context.flags.json ? "json" : flags.output;
  absl::StatusOr<Listing> listing = fetch(**client);
  if (!listing.ok()) return ServerError(listing.status());
  if (!flags.watch) {
    std::cout << Render(*listing, format, /*one_line_json=*/false);
    return kExitOk;
  }

  SigintTrap trap;
  const bool redraw = format != "json" && format != "csv" && isatty(STDOUT_FILENO) != 0;
  const absl::Duration interval = absl::Seconds(flags.interval_seconds);
  std::string previous;                // the last listing printed, as rendered
  std::set<std::string> previous_csv;  // its CSV rows
  bool failing = false;
  bool first = true;
  while (true) {
    if (listing.ok()) {
      if (failing) std::fprintf(stderr, "%s: answering again\n", Now().c_str());
      failing = false;
      const std::string text = Render(*listing, format, /*one_line_json=*/true);
      if (redraw) {
        // Home, clear the screen, then the listing under its time.
        std::cout << "\033[H\033[2J"
                  << "Every " << FormatSeconds(flags.interval_seconds) << ": " << Now()
                  << "  (Ctrl-C to stop)\n\n"
                  << text << std::flush;
      } else if (text != previous) {
        if (format == "csv") {
          if (first) std::cout << listing->table.CsvHeader() << "\n";
          std::set<std::string> rows;
          for (std::string& row : listing->table.CsvRows()) {
            if (!previous_csv.contains(row)) std::cout << row << "\n";
            rows.insert(std::move(row));
          }
          previous_csv = std::move(rows);
        } else if (format == "json") {
          std::cout << text;
        } else {
          std::cout << (first ? "" : "\n") << "# " << Now() << "\n" << text;
        }
        std::cout << std::flush;
      }
      previous = text;
      first = false;
    } else if (!failing) {
      failing = true;
      std::fprintf(stderr, "%s: %s (still watching)\n", Now().c_str(),
                   listing.status().ToString().c_str());
    }
    if (SleepUnlessInterrupted(interval)) break;
    listing = fetch(**client);
  }
  return kExitOk;
}

}  // namespace forecastd::ctl
