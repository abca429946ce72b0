#!/usr/bin/env bash
# Run the CUDA op tests under compute-sanitizer (memcheck, racecheck, synccheck) where a GPU exists.
#
#   bash tests/cuda_memcheck.sh            # all three tools over tests/test_ops_cuda.py
#   TOOLS=memcheck bash tests/cuda_memcheck.sh -k greedy   # extra args go to pytest
#
# Exits 0 with a message (and runs nothing) without nvidia-smi / a GPU / compute-sanitizer.
# Any sanitizer error fails the run (--error-exitcode), as does a failing test.
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
for tool in ${TOOLS:-memcheck racecheck synccheck}; do
  echo "== compute-sanitizer --tool $tool"
  # small sizes keep the instrumented run short; every kernel and dtype still runs
  "$SANITIZER" --tool "$tool" --error-exitcode 99 --target-processes all --print-limit 20 \
    "$PYTHON" -m pytest tests/test_ops_cuda.py -x -q -p no:cacheprovider -k "not 32000 and not first_token" "$@"
done
echo "cuda_memcheck: clean"
