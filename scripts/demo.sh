#!/usr/bin/env bash
# Builds (Release) and runs the feature-maps demo from build/examples/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

njobs() { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2; }

scripts/install_deps.sh

echo "==> configure build/ (Release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
echo "==> build feature_maps_demo"
cmake --build build --target feature_maps_demo -j"$(njobs)"

echo "==> run feature_maps_demo (in build/examples/)"
cd build/examples
exe=./feature_maps_demo
if [[ ! -x "${exe}" ]]; then
  # Multi-config generators put the binary in a per-config subdirectory.
  exe="$(find . -maxdepth 2 -type f -name feature_maps_demo -perm -u+x | head -n 1)"
fi
"${exe}" "$@"
