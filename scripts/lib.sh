# scripts/lib.sh — shared by scripts/test and scripts/demo: install what is missing, configure.

# The Debian packages shardalg's build, tests, tools and benchmarks use.
SHARDALG_PACKAGES=(cmake ninja-build g++ clang pkg-config ccache libeigen3-dev libopenmpi-dev openmpi-bin
                   doctest-dev libbenchmark-dev libopenblas-dev meson libcli11-dev nlohmann-json3-dev
                   libfmt-dev python3-matplotlib)
# Wanted by some tests, not required: PyTorch for the `compare` client (tests/compare/torch_client.py;
# its tests are skipped, with the reason, where it cannot be installed). About 35 s to install.
SHARDALG_OPTIONAL_PACKAGES=(python3-torch)

# The packages among its arguments that are not installed, space-separated.
missing_packages() {
  local out=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out+=("$p")
  done
  echo "${out[*]}"
}

ensure_packages() {
  local missing
  read -r -a missing <<< "$(missing_packages "${SHARDALG_PACKAGES[@]}")"
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    echo "== installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "Missing packages. Run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

# Installs what it can of SHARDALG_OPTIONAL_PACKAGES (as root); a failure is a line, not an exit.
ensure_optional_packages() {
  local missing
  read -r -a missing <<< "$(missing_packages "${SHARDALG_OPTIONAL_PACKAGES[@]}")"
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    echo "== installing (optional): ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } ||
      echo "== could not install ${missing[*]}: the tests that need them are skipped"
  else
    echo "== optional packages missing (tests that need them are skipped): ${missing[*]}"
  fi
}

# ccache keys on relative paths, so clones in other directories share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# The test targets load a precompiled header (tests/CMakeLists.txt); ccache caches such a compile
# only under these sloppiness settings (the header's own inputs are still hashed).
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"

# configure <build-dir> [extra cmake args…]
configure() {
  local dir=$1
  shift
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
}

jobs() { nproc 2>/dev/null || echo 2; }
