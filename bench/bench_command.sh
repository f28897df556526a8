# Sourced by the bench/*.sh wrappers: export_bench_command NAME ARGS... exports
# FORECASTD_BENCH_COMMAND, the command line the user typed (NAME and the arguments, each
# shell-quoted where needed), which the Python drivers record as what produced the figures.
export_bench_command() {
  FORECASTD_BENCH_COMMAND="$1"
  shift
  local arg
  for arg in "$@"; do
    FORECASTD_BENCH_COMMAND+=" $(printf '%q' "${arg}")"
  done
  export FORECASTD_BENCH_COMMAND
}
