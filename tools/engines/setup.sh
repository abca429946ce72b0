#!/usr/bin/env bash
# Install the serving engines whose config code checks trtspec bundles (the `engines` test tier), one virtual
# environment per engine release, cached under ${TRTSPEC_ENGINES_DIR:-~/.cache/trtspec/engines}/<engine>-<version>:
#
#   bash tools/engines/setup.sh            # vLLM 0.33.0 and SGLang 0.5.23
#   bash tools/engines/setup.sh vllm       # one of them
#   bash tools/engines/setup.sh trtllm     # TensorRT-LLM main-0004396's LLM-API code (sources laid out beforehand)
#
# Each environment: CPU torch first, then the engine from PyPI with --no-deps (its CUDA dependencies cannot run
# here), then the pure-Python packages its config code imports, pinned in tools/engines/<engine>-<version>.txt and
# installed with --no-deps. TensorRT-LLM does not install here: its environment holds CPU torch and the packages its
# llm_args.py imports (tools/engines/trtllm.txt), and its Python sources, which tools/engines/trtllm_sources.py lays
# out under trtllm-<version>/src from files saved by hand (tools/engines/trtllm-sources.yaml says which). Nothing of
# the engines is committed to this repository. An environment whose .ready marker matches its requirements file is
# reused; a failed install leaves no marker.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="${TRTSPEC_ENGINES_DIR:-$HOME/.cache/trtspec/engines}"
TORCH="${TRTSPEC_ENGINES_TORCH:-torch==2.13.0}"
declare -A VERSION=([vllm]=0.33.0 [sglang]=0.5.23)
export PIP_DISABLE_PIP_VERSION_CHECK=1

setup_one() {
  local engine="$1" version="${VERSION[$1]}"
  local env="$ROOT/$engine-$version" req="$HERE/$engine-$version.txt"
  local stamp
  stamp="$(sha256sum "$req" | cut -c1-16) $TORCH"
  if [[ -f "$env/.ready" && "$(cat "$env/.ready")" == "$stamp" ]]; then
    echo "engines: $engine $version ready at $env"
    return 0
  fi
  local t0=$SECONDS
  rm -rf "$env"
  mkdir -p "$ROOT"
  python3 -m venv "$env"
  "$env/bin/pip" install -q "$TORCH"
  "$env/bin/pip" install -q --no-deps "$engine==$version"
  "$env/bin/pip" install -q --no-deps -r "$req"
  echo "$stamp" > "$env/.ready"
  echo "engines: $engine $version installed at $env in $((SECONDS - t0)) s"
}

setup_trtllm() {
  local version="${TRTLLM_VERSION:-main-0004396}"
  local env="$ROOT/trtllm-$version" req="$HERE/trtllm.txt"
  if ! python3 "$HERE/trtllm_sources.py" --version "$version"; then
    echo "engines: trtllm $version: its Python sources are not laid out under $env/src (see above and" \
         "tools/engines/trtllm-sources.yaml); they are read from the public repository by hand, not downloaded" >&2
    return 1
  fi
  local stamp
  stamp="$(cat "$req" "$HERE/trtllm-sources.yaml" | sha256sum | cut -c1-16) $TORCH"
  if [[ -f "$env/.ready" && "$(cat "$env/.ready")" == "$stamp" ]]; then
    echo "engines: trtllm $version ready at $env"
    return 0
  fi
  local t0=$SECONDS
  rm -rf "$env/bin" "$env/lib" "$env/lib64" "$env/include" "$env/pyvenv.cfg" "$env/.ready"  # keeps src/
  python3 -m venv "$env"
  "$env/bin/pip" install -q "$TORCH"
  "$env/bin/pip" install -q --no-deps -r "$req"
  echo "$stamp" > "$env/.ready"
  echo "engines: trtllm $version installed at $env in $((SECONDS - t0)) s"
}

engines=("$@")
[[ ${#engines[@]} -eq 0 ]] && engines=(vllm sglang)
for e in "${engines[@]}"; do
  if [[ $e == trtllm ]]; then setup_trtllm; continue; fi
  [[ -n "${VERSION[$e]:-}" ]] || { echo "engines: unknown engine '$e' (known: ${!VERSION[*]} trtllm)" >&2; exit 2; }
  setup_one "$e"
done
