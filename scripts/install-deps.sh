#!/bin/sh
# Installs the Debian packages clshim needs. Idempotent: a quick no-op when
# everything is present. Needs root (or sudo) only when something is missing.
#   scripts/install-deps.sh [--no-pypi] [EXTRA_PACKAGE...]
# --no-pypi: the Debian packages only, nothing from the Python package index
# (`make demo`, `make all`: only integration/test_remote_s3 needs moto).
# With arguments it installs those too: targets that need more than make
# check (check-fresh's debootstrap) name them here, so every package the
# project uses is installed by the project's own files.
set -eu

# Everything make check builds with or runs: compilers and LLVM 15, the
# OpenCL loader, headers and PoCL, the store's libraries, cmocka, and what
# the tests drive (clinfo, PyOpenCL with pytest and NumPy, Python itself),
# the remote tier's hiredis with the Redis server and client its tests start,
# libcurl for its HTTP and S3 backends, openssl for the throwaway
# certificate of the HTTPS test, and nginx (its WebDAV module is built in),
# the stock HTTP store integration/test_remote_nginx runs on loopback with a
# private config (the package's own service on port 80 is not used).
PACKAGES="build-essential pkg-config clang-15 llvm-15-dev libllvmspirvlib-15-dev llvm-spirv-15
ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers pocl-opencl-icd clinfo
python3 python3-venv python3-pyopencl python3-pytest python3-numpy
liblmdb-dev lmdb-utils libcmocka-dev libxxhash-dev libzstd-dev zstd libsodium-dev libclc-15
libhiredis-dev redis-server redis-tools libcurl4-openssl-dev openssl nginx"

# moto's S3 server (PyPI), which integration/test_remote_s3 starts on
# loopback: installed here, never at test time, into a virtual environment
# of the checkout's own (.deps/moto, ignored by git), because Debian's
# python3 refuses pip installs outside one (PEP 668).
MOTO_VENV=$(cd "$(dirname "$0")/.." && pwd)/.deps/moto
install_moto() {
    "$MOTO_VENV/bin/python" -c 'import moto.server, boto3' 2>/dev/null && return 0
    echo "clshim: installing moto[server] into $MOTO_VENV"
    rm -rf "$MOTO_VENV"
    python3 -m venv "$MOTO_VENV" && "$MOTO_VENV/bin/python" -m pip install --quiet 'moto[server]>=5,<6' ||
        { echo "clshim: cannot install moto[server] into $MOTO_VENV (needed by integration/test_remote_s3)" >&2; exit 1; }
}

WANT_MOTO=1
if [ "${1:-}" = --no-pypi ]; then
    WANT_MOTO=0
    shift
fi
install_moto_if_wanted() { [ "$WANT_MOTO" = 0 ] || install_moto; }

missing=""
for p in $PACKAGES "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && { install_moto_if_wanted; exit 0; }

echo "clshim: installing missing packages:$missing"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo"
else
    echo "clshim: cannot install packages: not root and no password-less sudo." >&2
    echo "clshim: run as root: apt-get install$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "clshim: packages installed"
install_moto_if_wanted
