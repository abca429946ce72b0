#!/usr/bin/env bash
# Download, as Python 3.12 manylinux x86-64 wheels into .whl/, the packages the H200 test machine's
# image lacks (tools/gpu_check/h200_image.yaml, "absent"), so that a GPU run can carry them
# (tools/gpu_check.sh installs .whl/*.whl into a temporary --target directory before its checks).
#
#   bash tools/gpu_check_wheels.sh               # trtspec's missing install_requires (no check needs them)
#   bash tools/gpu_check_wheels.sh --flashinfer  # plus flashinfer-python for the optional timing.flashinfer
#   bash tools/gpu_check_wheels.sh --only flashinfer
#
# Prints each wheel's size, the total, the working tree's size and whether both fit the 64 MiB a
# GPU run may carry, and each wheel's requirements that the image lacks too (name them in
# h200_image.yaml and rerun). Needs network access to a package index. One version per package:
# an older wheel of the same package in .whl/ is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LIMIT_MIB=64
groups=(pydantic modelopt onnxruntime_extensions tritonclient)
case "${1:-}" in
  --flashinfer) groups+=(flashinfer) ;;
  --only) groups=("${2:?--only needs a group name}") ;;
  "") ;;
  *) echo "usage: $0 [--flashinfer | --only GROUP]" >&2; exit 2 ;;
esac

dists=$("$PY" - "${groups[@]}" <<'EOF'
import sys, yaml
image = yaml.safe_load(open("tools/gpu_check/h200_image.yaml"))
for group in sys.argv[1:]:
    if group not in image["absent"]:
        sys.exit(f"unknown group {group!r}; expected one of {', '.join(image['absent'])}")
    print(" ".join(image["absent"][group]["dists"]))
EOF
)
mkdir -p .whl
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
for d in $dists; do
  name=${d%%==*}
  norm=$(echo "$name" | tr 'A-Z-' 'a-z_')
  find .whl -maxdepth 1 -iname "${norm}-*.whl" ! -iname "${norm}-${d#*==}-*" -delete 2>/dev/null || true
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$d" 2> >(grep -v "^WARNING: Location" >&2)
done

"$PY" - "$LIMIT_MIB" <<'EOF'
import re, subprocess, sys, zipfile, yaml
from pathlib import Path
limit = int(sys.argv[1]) * 2**20
image = yaml.safe_load(open("tools/gpu_check/h200_image.yaml"))
known = {n.lower().replace("_", "-") for n in image["present"]}
for group in image["absent"].values():
    known |= {d.split("==")[0].lower().replace("_", "-") for d in group["dists"]}
total = 0
for whl in sorted(Path(".whl").glob("*.whl")):
    size = whl.stat().st_size
    total += size
    meta = next(n for n in zipfile.ZipFile(whl).namelist() if n.endswith(".dist-info/METADATA"))
    reqs = [l.split(":", 1)[1].strip() for l in zipfile.ZipFile(whl).read(meta).decode().splitlines()
            if l.startswith("Requires-Dist:") and "extra ==" not in l]
    names = {re.match(r"[A-Za-z0-9._-]*", r).group(0).lower().replace("_", "-") for r in reqs}
    lacking = sorted(names - known - {""})
    print(f"{size / 2**20:8.2f} MiB  {whl.name}" + (f"   (also needs, absent from the image: {', '.join(lacking)})"
                                                    if lacking else ""))
files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True,
                       check=True).stdout.split(b"\0")
tree = sum(Path(f.decode()).stat().st_size for f in files if f and Path(f.decode()).is_file())
print(f"{total / 2**20:8.2f} MiB  wheels in .whl/ ({len(list(Path('.whl').glob('*.whl')))})")
print(f"{tree / 2**20:8.2f} MiB  working tree (tracked + untracked, not ignored)")
fits = total + tree <= limit
print(f"{(total + tree) / 2**20:8.2f} MiB  together: {'fits' if fits else 'does NOT fit'} the {limit // 2**20} MiB "
      f"a GPU run carries" + ("" if fits else " (drop a group: --only GROUP)"))
EOF
