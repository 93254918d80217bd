# Sourced first by the shell benchmarks, with their arguments: HERE (bench/), and BUILD_ARG from
# an optional first argument that is not an option (default bench/../build); the arguments left
# are the script's own again ("$@" after `source bench/lib.sh "$@"; set -- "${BENCH_ARGS[@]}"`).
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD_ARG=$HERE/../build
BENCH_ARGS=("$@")
if ((${#BENCH_ARGS[@]})) && [[ ${BENCH_ARGS[0]} != --* ]]; then
  BUILD_ARG=${BENCH_ARGS[0]}
  BENCH_ARGS=("${BENCH_ARGS[@]:1}")
fi
