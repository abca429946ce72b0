#!/usr/bin/env bash
# Regenerate the stored recipe book (recipes/book/*.yaml) with the planner. Acceptance comes from the priors that
# list each (drafter, model) in recipes/priors/*.yaml; every recipe records its inputs under `provenance`.
set -euo pipefail
cd "$(dirname "$0")/.."
gen() {  # model gpu tp quant drafter [extra plan options...]
  local name="$1__$2__tp$3__${4//:/-}__$5"
  trtspec plan --model "$1" --gpu "$2" --tp "$3" --quant "$4" --drafter "$5" "${@:6}" \
    --out "recipes/book/$name.yaml" > /dev/null
  echo "$name"
}
gen llama-3.1-8b h100 1 none eagle3 --context 2048
gen llama-3.1-8b h200 1 none eagle3 --context 2048
gen llama-3.1-8b l40s 1 fp8 eagle3 --context 2048
gen llama-3.1-8b a100 1 none eagle3 --context 2048
gen llama-3.1-8b rtx-pro-6000 1 fp8 eagle3 --context 2048
gen llama-3.3-70b h200 1 fp8 eagle3 --context 2048
gen llama-3.3-70b h100 2 fp8 eagle3 --context 2048
gen llama-3.3-70b b200 1 fp8 eagle3 --context 2048
gen llama-3.3-70b h20 1 fp8 eagle3 --context 2048
gen deepseek-r1 b200 8 fp4 mtp --context 2048
gen deepseek-r1 h200 8 fp8 mtp --context 2048
gen deepseek-r1 gb200 8 fp4 mtp --context 2048
gen deepseek-r1 b300 8 fp4 mtp --context 2048
