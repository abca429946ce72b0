#!/usr/bin/env bash
# Run trtspec's CUDA kernels under compute-sanitizer where a GPU exists: the per-op drivers
# tools/gpu_check/sanitize_<op>.py (B in {1,3,99}, N up to 64, V in {111,32000,128256}, valid and bad
# inputs), each under each tool, several at a time (tools/gpu_check/run_sanitizer.py).
#
#   bash tests/cuda_memcheck.sh                                  # memcheck, racecheck, synccheck, initcheck
#   TOOLS=memcheck bash tests/cuda_memcheck.sh --sizes quick --ops verify_greedy   # extra args: run_sanitizer.py
#   PYTEST=1 TOOLS=memcheck bash tests/cuda_memcheck.sh -k greedy   # the old way: tests/test_ops_cuda.py under
#                                                                   # the sanitizer (slow); extra args go to pytest
#
# Exits 0 with a message (and runs nothing) without nvidia-smi / a GPU / compute-sanitizer.
# Any sanitizer error fails the run (--error-exitcode), as does a failing case or test.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "cuda_memcheck: no GPU; nothing run" >&2
  exit 0
fi
SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")}
if [ ! -x "$SANITIZER" ]; then
  echo "cuda_memcheck: compute-sanitizer not found (set COMPUTE_SANITIZER); nothing run" >&2
  exit 0
fi
PYTHON=${PYTHON:-python3}
if [ "${PYTEST:-0}" = 1 ]; then
  for tool in ${TOOLS:-memcheck racecheck synccheck}; do
    echo "== compute-sanitizer --tool $tool (pytest)"
    # small sizes keep the instrumented run short; every kernel and dtype still runs
    "$SANITIZER" --tool "$tool" --error-exitcode 99 --target-processes all --print-limit 20 \
      "$PYTHON" -m pytest tests/test_ops_cuda.py -x -q -p no:cacheprovider -k "not 32000 and not first_token" "$@"
  done
  echo "cuda_memcheck: clean"
  exit 0
fi
export COMPUTE_SANITIZER=$SANITIZER
tools=${TOOLS:-memcheck racecheck synccheck initcheck}
"$PYTHON" tools/gpu_check/run_sanitizer.py --tools "${tools// /,}" --logs "${LOGS:-gpu_check_out/sanitizer}" "$@"
echo "cuda_memcheck: clean"
