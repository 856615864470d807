#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages coulomb needs, but only those missing.
# Idempotent: silent (and no apt-get call) when everything is already present.
set -euo pipefail

PACKAGES=(cmake g++ make libeigen3-dev catch2 libbenchmark-dev gnuplot-nox zlib1g-dev doxygen
  clang libclang-rt-dev libcli11-dev nlohmann-json3-dev openmpi-bin libopenmpi-dev)

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps: not a Debian-based system (no dpkg-query/apt-get); skipping." >&2
  echo "install_deps: please make sure these (or equivalents) are installed: ${PACKAGES[*]}" >&2
  exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null || true)"
  if [[ "${status}" != *"install ok installed"* ]]; then
    missing+=("${pkg}")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install_deps: missing packages: ${missing[*]}" >&2
    echo "install_deps: not root and sudo is not available; install them manually." >&2
    exit 1
  fi
fi

echo "install_deps: missing packages: ${missing[*]}"
echo "install_deps: running: ${SUDO[*]:+${SUDO[*]} }apt-get update"
${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update
echo "install_deps: running: ${SUDO[*]:+${SUDO[*]} }apt-get install -y --no-install-recommends ${missing[*]}"
${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
echo "install_deps: done."
