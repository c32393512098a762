#!/usr/bin/env bash
# GPU check of the fused acceptance kernel (cuda/accept.cu) on a CUDA machine.
#
#   bash scripts/gpu_check.sh OUT_DIR          (from anywhere; it cds to the repository root)
#
# Steps, each time-boxed (the whole run stays under GPU_CHECK_BUDGET_S, default 300 s):
#   env           facts (GPU, driver, nvcc, torch); no visible GPU -> the rest is skipped, exit 0
#   build         the kernel built and loaded the way users get it (localspec.kernels._build,
#                 arch from NVML: sm_90 on an H100/H200), ptxas report, one smoke step
#   gpu tests     tests/kernels/test_gpu.py, the `gpu`-marked kernel tests (fused kernel and
#                 torch-CUDA vs the NumPy reference; the batched kernel vs per-item calls)
#   lossless gpu  tests/engine/test_lossless_gpu.py, only where llama.cpp-CUDA and the weights are
#   bench         localspec.kernels.bench: fused CUDA vs torch-CUDA vs NumPy per step
#   batch bench   B = 1, 4, 8 sequences (γ 4, V 151936): B accept calls vs one accept_batch, per backend
#   sanitizer     compute-sanitizer memcheck/racecheck/synccheck (+ initcheck, informational) on
#                 small steps through the kernel, single and batched (works on Firecracker machines,
#                 not on gVisor)
#   kernel suite  the other tests/kernels tests, with a GPU present (minus the 6-arch compile)
# Writes OUT_DIR/gpu_check.json (results, timings) and OUT_DIR/gpu_check.log (everything
# printed), and prints a short table last. Exit 0: passed, or skipped without a GPU; 1: failed.
#
# Needs python3 with numpy and pytest (torch for the torch-CUDA column, nvidia-ml-py for the
# arch); localspec is used from the source tree (PYTHONPATH=.), nothing is installed.
# Knobs: PYTHON (default python3); GPU_CHECK_FORCE=1 runs every step without a GPU (a dry
# run); GPU_CHECK_QUICK=1 shrinks the bench grid; GPU_CHECK_ARCH=sm_90 builds for that arch.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: bash scripts/gpu_check.sh OUT_DIR" >&2
  exit 2
fi
mkdir -p "$1" && OUT=$(cd "$1" && pwd) || exit 2
cd "$(dirname "$0")/.." || exit 2

PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-300}
REPORT_RESERVE=20
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT  # everything worth keeping is under OUT_DIR
export LOCALSPEC_CACHE_DIR="$WORK/cache"  # a fresh build: never a stale library from a user cache
unset LOCALSPEC_KERNEL
START=$(date +%s)

# run_step NAME MAX_SECONDS CMD...: runs CMD under timeout (MAX_SECONDS or what is left of the
# budget), appends "name rc seconds note" to $WORK/steps.tsv, returns CMD's exit status.
run_step() {
  local name=$1 max=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - START) - REPORT_RESERVE))
  if [ "$left" -lt 15 ]; then
    echo "== $name: not run: out of time (budget ${BUDGET}s)"
    printf '%s\t124\t0\tnot run: out of time\n' "$name" >>"$WORK/steps.tsv"
    return 124
  fi
  local limit=$((max < left ? max : left))
  echo
  echo "== $name (limit ${limit}s): $*"
  local t0 rc note=""
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@"
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    note="timed out after ${limit}s"
    echo "== $name: $note"
  fi
  printf '%s\t%s\t%.1f\t%s\n' "$name" "$rc" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$note" >>"$WORK/steps.tsv"
  return "$rc"
}

main() {
  echo "gpu_check $(date -u +%FT%TZ): repo $(pwd), $($PY --version 2>&1) at $(command -v "$PY"), work $WORK"
  git log -1 --format='commit %H %s' 2>/dev/null || true
  run_step env 90 "$PY" scripts/gpu_check.py env "$WORK"
  if [ $? -ne 3 ]; then
    run_step build 120 "$PY" scripts/gpu_check.py build "$WORK"
    run_step "gpu tests" 150 "$PY" -m pytest -p no:cacheprovider -v -rfEs -o faulthandler_timeout=60 \
      tests/kernels/test_gpu.py --junitxml="$WORK/junit-gpu.xml"
    if reason=$("$PY" scripts/gpu_check.py lossless-gpu); then
      run_step "lossless gpu" 150 "$PY" -m pytest -p no:cacheprovider -v -rfEs tests/engine/test_lossless_gpu.py \
        --junitxml="$WORK/junit-lossless.xml"
    else
      echo
      echo "== lossless gpu: not run: $reason"
      echo "$reason" >"$WORK/lossless.txt"
    fi
    run_step bench 120 "$PY" scripts/gpu_check.py bench "$WORK" ${GPU_CHECK_QUICK:+--quick}
    run_step "batch bench" 90 "$PY" scripts/gpu_check.py bench-batch "$WORK"
    run_step sanitizer 150 "$PY" scripts/gpu_check.py sanitize "$WORK"
    run_step "kernel suite" 120 "$PY" -m pytest -p no:cacheprovider -q -rfEs -o faulthandler_timeout=60 \
      -m "not gpu" tests/kernels --deselect tests/kernels/test_compile.py::test_compile_check_builds_every_arch \
      --junitxml="$WORK/junit-kernels.xml"
  fi
  echo
  "$PY" scripts/gpu_check.py report "$WORK" "$OUT"
}

main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
