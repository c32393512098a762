#!/usr/bin/env bash
# Set up localspec on a fresh machine: venv, torch (CPU build first, so nothing pulls a
# multi-GB CUDA torch), llama-cpp-python built so it cannot hit the AMX crash, the
# package with its test extras, and the offline default model pair (~1.6 GB).
#
#   LLAMA_CMAKE_ARGS   CMake flags for llama-cpp-python (default
#                      "-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF -DGGML_RPC=ON"; GPU:
#                      LLAMA_CMAKE_ARGS="-DGGML_CUDA=on -DGGML_LLAMAFILE=OFF -DGGML_RPC=ON" make setup)
#                      GGML_NATIVE=OFF: the native build enables AMX kernels that crash
#                      (llama.cpp #20824). GGML_LLAMAFILE=OFF: llamafile's sgemm computes
#                      batches of 2+ rows in another summation order than one row, which
#                      would break `--numerics exact` (see README, "Lossless").
#                      GGML_RPC=ON: ggml's RPC backend (`localspec worker`, `--rpc`); it adds
#                      a backend, not kernels, so it changes no numerics.
#   TORCH_SPEC         torch requirement (default torch==2.13.0)
#   PYTHON             interpreter for the venv (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
LLAMA_VERSION=0.3.36
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF -DGGML_RPC=ON}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/localspec
# one wheel per CMake flag set, so a CPU and a CUDA build never get mixed up
WHEELS="$CACHE/wheels/llama-cpp-python-$LLAMA_VERSION-$(printf '%s' "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
$PIP install --quiet --upgrade pip wheel

step "installing $TORCH_SPEC"
$PIP install --quiet "$TORCH_SPEC"

# the venv remembers which flags its llama-cpp-python was built with: other flags, other wheel
BUILT_WITH="$VENV/.llama-cmake-args"
if ! "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null \
   || [ "$(cat "$BUILT_WITH" 2>/dev/null)" != "$LLAMA_CMAKE_ARGS" ]; then
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    step "building llama-cpp-python $LLAMA_VERSION with CMAKE_ARGS=$LLAMA_CMAKE_ARGS (about 5 minutes on 2 cores)"
    mkdir -p "$WHEELS"
    # --no-cache-dir: pip's own wheel cache ignores CMAKE_ARGS and would hand back another build
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      $PIP wheel --no-deps --no-cache-dir --wheel-dir "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
  fi
  step "installing llama-cpp-python from $WHEELS"
  $PIP install --quiet --no-deps --force-reinstall "$WHEELS"/llama_cpp_python-*.whl
  printf '%s' "$LLAMA_CMAKE_ARGS" > "$BUILT_WITH"
fi

step "installing localspec with its test extras"
$PIP install --quiet -e ".[test]"

step "installing the offline default pair into the model store"
"$VENV/bin/python" -m localspec.store

touch "$VENV/.setup-done"
step "setup done: .venv/bin/localspec"
