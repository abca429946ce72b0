#!/usr/bin/env bash
# One prepared run that proves trtspec's CUDA path on a GPU machine (an H200 in mind), in one call.
#
#   bash tools/gpu_check.sh [--quick] [--out DIR] [--budget SECONDS] [--no-build]
#   bash tools/gpu_check.sh --cpu [--cpu-smoke] [--emulate-image]      # the no-GPU mode (this is what CI-like
#                                                                       # machines get without --cpu too)
# Steps, each recorded as a result (check, pass | fail | skipped: reason, figure):
#   env, deps         the machine, and which packages each check needs that are missing
#   build.extension   trtspec._C with its CUDA sources for sm_90 against the machine's torch, no network
#                     (pip install --no-deps --no-build-isolation -e ., else setup.py build_ext --inplace)
#   pytest.cuda       pytest -m cuda (CUDA vs CPU outputs of every op)
#   sanitizer.*       compute-sanitizer memcheck, racecheck (+ synccheck, initcheck) over each op's driver,
#                     B in {1,3,99}, N up to 64, V in {111,32000,128256} (memcheck; the others on a subset),
#                     bad-input paths included, each tool also over a planted error it must report
#   runtime.greedy    the runtime on cuda for the demo pair: greedy output equal to the CPU's, token for token
#   timing.ops        CUDA-event timing of each op, bandwidth vs the bytes it must move and vs a D2D copy
#   timing.flashinfer FlashInfer's chain_speculative_sampling beside ours (optional: carried wheel)
#   profile           trtspec profile --device cuda (the cost table, saved)
#   bench_recipe      benchmarks/bench_recipe.py --device cuda (planner vs swept D)
# Correctness steps run side by side after the build; timing steps run alone. A time budget (450 s;
# --quick 240 s; 1800 s without a GPU) skips what no longer fits, so the run ends inside 8 minutes on
# an H200. Without a GPU every GPU step is "skipped: no GPU" and its code is dry-run on the CPU
# instead (cpu_dry_run.py);
# the compile-only checks build.nvcc / build.bindings run there (not with --cpu-smoke).
# Output: $OUT (or ./gpu_check_out): gpu_check.log (everything), summary.json, logs.tar.gz (each
# step's log and result), ops_timing.json, cost_table.json, bench_recipe.json, runtime.json; the
# summary table is printed last. Exit status 1 when a check failed.
# Packages the machine lacks: no check needs those the H200 image lacks (tools/gpu_check/h200_image.yaml;
# the deps row says what is missing where it runs) except the optional FlashInfer comparison: run
# `bash tools/gpu_check_wheels.sh --only flashinfer` where a package index is reachable, and bring .whl/
# along; its wheels are installed into a temporary --target directory before the checks.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
QUICK=0 FORCE_CPU=0 SMOKE=0 EMULATE=0 NO_BUILD=0 BUDGET=""
OUT_DIR=${OUT:-$ROOT/gpu_check_out}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --cpu) FORCE_CPU=1 ;;
    --cpu-smoke) FORCE_CPU=1 SMOKE=1 ;;
    --emulate-image) EMULATE=1 ;;
    --no-build) NO_BUILD=1 ;;
    --out) OUT_DIR=${2:?--out needs a directory}; shift ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$BUDGET" in ""|*[!0-9]*) [ -n "$BUDGET" ] && { echo "gpu_check: --budget must be whole seconds, got $BUDGET" >&2; exit 2; } ;; esac
START=$(date +%s)
mkdir -p "$OUT_DIR" || { echo "gpu_check: cannot create --out $OUT_DIR" >&2; exit 2; }
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
RES=$WORK/results LOGS=$WORK/logs
mkdir -p "$RES" "$LOGS"
rm -f "$OUT_DIR"/{gpu_check.log,summary.json,logs.tar.gz,ops_timing.json,cost_table.json,bench_recipe.json,runtime.json}
LOG=$OUT_DIR/gpu_check.log
: >"$LOG"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 GPU_CHECK_RESULTS=$RES
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
JOBS=$(nproc 2>/dev/null || echo 4)

elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[gpu_check +$(elapsed)s] $*" | tee -a "$LOG"; }
result() { "$PY" tools/gpu_check/result.py "$RES" "$@"; }
remaining() { echo $(( BUDGET - $(elapsed) )); }
summary() { "$PY" tools/gpu_check/summary.py "$RES" "$OUT_DIR" --mode "$MODE" --seconds "$(elapsed)" \
              $([ $QUICK = 1 ] && echo --quick) "$@"; }

# step NAME CHECKS MAX_SECONDS CMD...: run CMD with a limit of min(MAX, what the budget has left);
# a check of CHECKS (comma-separated) that CMD did not record is recorded as failed (exit code, timeout)
step() {
  local name=$1 checks=$2 max=$3 left limit rc c
  shift 3
  left=$(remaining)
  if [ "$left" -lt 20 ]; then
    for c in ${checks//,/ }; do result "$c" "skipped: time budget spent (--budget $BUDGET s)" "-"; done
    log "step $name skipped: ${left}s of the budget left"
    return 0
  fi
  limit=$(( max < left ? max : left ))
  log "step $name (limit ${limit}s): $*"
  GPU_CHECK_STEP_LIMIT=$limit timeout --kill-after=15 "$limit" "$@" >"$LOGS/$name.out" 2>&1
  rc=$?
  { echo "----- $name (exit $rc, +$(elapsed)s)"; cat "$LOGS/$name.out"; } >>"$LOG"
  for c in ${checks//,/ }; do
    [ -f "$RES/$c.json" ] && continue
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      result "$c" fail "timeout after ${limit}s (see logs.tar.gz: $name.out)"
    else
      result "$c" fail "exit $rc without a result: $(tail -n 2 "$LOGS/$name.out" | tr '\n' ' ' | cut -c1-240)"
    fi
  done
  log "step $name done (exit $rc)"
}

finish() {
  cp "$WORK"/artifacts/*.json "$OUT_DIR"/ 2>/dev/null
  tar -czf "$OUT_DIR/logs.tar.gz" -C "$WORK" results logs 2>/dev/null
  summary --quiet   # summary.json with the final counts
  log "done in $(elapsed)s; results in $OUT_DIR"
  summary | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  rm -rf "$WORK"
  exit "$rc"
}

# ---- mode: a GPU that torch can use, or none ----------------------------------------------------
MODE=cpu
if [ $FORCE_CPU = 0 ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
   && "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  MODE=gpu
fi
[ -n "$BUDGET" ] || BUDGET=$( { [ $MODE = cpu ] && echo 1800; } || { [ $QUICK = 1 ] && echo 240; } || echo 450)
mkdir -p "$WORK/artifacts"
log "mode $MODE, quick $QUICK, budget ${BUDGET}s, python $("$PY" -c 'import sys; print(sys.version.split()[0])'), out $OUT_DIR"

if [ $MODE = gpu ] && ls .whl/*.whl >/dev/null 2>&1; then
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
       .whl/*.whl >>"$LOG" 2>&1; then
    export PYTHONPATH="$PYTHONPATH:$WORK/site"
    export GPU_CHECK_WHEELS="$(cd .whl && ls *.whl | tr '\n' ' ')"
    log "installed carried wheels: $GPU_CHECK_WHEELS"
  else
    log "carried wheels in .whl/ did not install (see gpu_check.log); going on without them"
  fi
fi
if [ $EMULATE = 1 ]; then
  HIDE=$("$PY" -c "import yaml; print(','.join(yaml.safe_load(open('tools/gpu_check/h200_image.yaml'))['absent']))")
  export GPU_CHECK_HIDE=$HIDE PYTHONPATH="$ROOT/tools/gpu_check/hide:$PYTHONPATH"
  log "emulating the GPU machine's image: hiding $HIDE"
fi

step env env,deps 60 "$PY" tools/gpu_check/env_report.py $([ $MODE = gpu ] && echo --gpu) --results "$RES"

# ---- no GPU: compile-only checks and the dry runs ------------------------------------------------
if [ $MODE = cpu ]; then
  if [ $SMOKE = 1 ]; then
    result build.nvcc "skipped: --cpu-smoke" "nvcc compile of the .cu sources not run"
    result build.bindings "skipped: --cpu-smoke" "host compile of the CUDA bindings not run"
  else
    step compile build.nvcc,build.bindings 1200 "$PY" tools/gpu_check/compile_check.py --results "$RES" --logs "$LOGS" --jobs "$JOBS"
  fi
  step dry_run build.extension,pytest.cuda,sanitizer.memcheck,sanitizer.racecheck,runtime.greedy,timing.ops,timing.flashinfer,profile,bench_recipe \
    900 "$PY" tools/gpu_check/cpu_dry_run.py --results "$RES" --logs "$LOGS" --work "$WORK" \
    --sizes $([ $SMOKE = 1 ] && echo smoke || echo quick)
  finish
fi

# ---- GPU ----------------------------------------------------------------------------------------
SIZES=full TOOLS=memcheck,racecheck,synccheck,initcheck Q=""
[ $QUICK = 1 ] && SIZES=quick TOOLS=memcheck,racecheck Q=--quick
if [ $NO_BUILD = 1 ] || { [ $QUICK = 1 ] && "$PY" tools/gpu_check/steps.py probe >/dev/null 2>&1; }; then
  if "$PY" tools/gpu_check/steps.py probe >>"$LOG" 2>&1; then
    result build.extension pass "already built: trtspec._C runs on CUDA (build skipped)"
  else
    result build.extension fail "--no-build, but trtspec._C does not run on CUDA"
  fi
else
  step build build.extension 300 "$PY" tools/gpu_check/steps.py build --results "$RES" --logs "$LOGS" --jobs "$JOBS"
fi
if ! grep -q '"status": "pass"' "$RES/build.extension.json" 2>/dev/null; then
  for c in pytest.cuda sanitizer.${TOOLS//,/ sanitizer.} runtime.greedy timing.ops timing.flashinfer profile bench_recipe; do
    result "$c" "skipped: build.extension failed" "-"
  done
  finish
fi
summary --quiet

# correctness, side by side (the GPU is shared; nothing here is timed)
step pytest pytest.cuda 180 "$PY" tools/gpu_check/steps.py pytest --results "$RES" --logs "$LOGS" &
step sanitizer "sanitizer.${TOOLS//,/,sanitizer.}" 240 "$PY" tools/gpu_check/run_sanitizer.py --tools "$TOOLS" --sizes "$SIZES" --other-sizes quick \
  --jobs 10 --timeout 220 --logs "$LOGS" --results "$RES" &
step runtime runtime.greedy 150 "$PY" tools/gpu_check/runtime_check.py $Q --results "$RES" --json "$WORK/artifacts/runtime.json" &
wait
summary --quiet

# timing, one at a time
step timing timing.ops 120 "$PY" tools/gpu_check/time_ops.py $Q --results "$RES" --json "$WORK/artifacts/ops_timing.json"
step profile profile 120 "$PY" tools/gpu_check/steps.py profile $Q --results "$RES" --logs "$LOGS" --out "$WORK/artifacts"
step bench_recipe bench_recipe 180 "$PY" tools/gpu_check/steps.py bench_recipe $Q --results "$RES" --logs "$LOGS" \
  --out "$WORK/artifacts" --work "$WORK"
if [ $QUICK = 1 ]; then
  result timing.flashinfer "skipped: --quick" "-"
else
  FI_LIMIT=$(( $(remaining) - 20 < 130 ? $(remaining) - 20 : 130 ))
  [ "$FI_LIMIT" -ge 5 ] || FI_LIMIT=5
  step flashinfer timing.flashinfer 150 "$PY" tools/gpu_check/flashinfer_check.py --results "$RES" --json "$LOGS/flashinfer.json" \
    --limit "$FI_LIMIT"
fi
finish
