# Writes the real series forecastd ships in data/ from the R packages that hold them:
#   EuStockMarkets (R's datasets package): daily closing prices of four European stock indices,
#     1991-1998, in business time (weekends and holidays omitted), 1,860 rows;
#   taylor (the forecast package): half-hourly electricity demand of England and Wales in
#     megawatts, Monday 5 June to Sunday 27 August 2000, 4,032 rows.
# Usage: Rscript scripts/data/export_series.R OUTPUT_DIR (scripts/data/export-series.sh runs it).
args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 1) stop("usage: Rscript export_series.R OUTPUT_DIR")
out <- args[[1]]
suppressPackageStartupMessages(library(forecast))

# Every value as R holds it (15 significant digits), no quotes, no row names.
write_series <- function(frame, name) {
  path <- file.path(out, name)
  write.table(frame, path, sep = ",", quote = FALSE, row.names = FALSE, eol = "\n",
              dec = ".")
  cat(sprintf("%s: %d rows, columns %s\n", path, nrow(frame), paste(names(frame), collapse = ",")))
}

# The time column: the series' own time index, in decimal years (1991.49615...), strictly
# increasing, as R's time() gives it.
eu <- data.frame(time = format(as.numeric(time(EuStockMarkets)), digits = 15),
                 as.data.frame(EuStockMarkets))
write_series(eu, "eu_stock_markets.csv")

# The time column: the start of each half-hour on the local clock, from 2000-06-05 00:00 (the
# package documents the first and last day; 84 days of 48 half-hours each).
start <- as.POSIXct("2000-06-05 00:00", tz = "UTC")
stamps <- format(start + 1800 * (seq_along(taylor) - 1), "%Y-%m-%dT%H:%M", tz = "UTC")
stopifnot(length(taylor) == 84 * 48)
write_series(data.frame(time = stamps, demand = as.numeric(taylor)), "taylor.csv")
