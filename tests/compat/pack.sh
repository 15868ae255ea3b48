# shellcheck shell=bash
# pack.sh — the steps the GPU scripts' --pack modes share (nvidia_*.sh,
# bench/gpu-pack.sh); sourced, never run. Nothing can be installed on the
# GPU machine, so a pack is a folder, carried there by the device tool, that
# holds what this machine built and the libraries that machine lacks.

PACK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# What libclshim.so and clshim-tool link that the GPU machine lacks.
PACK_SHIM_LIBS="libOpenCL.so.1 liblmdb.so.0 libzstd.so.1 libhiredis.so.0.14 libsodium.so.23"

# pack_libs DEST LIB...: each library as ld.so.cache finds it (x86-64), into DEST/lib.
pack_libs() {
    local dest=$1 lib path
    shift
    mkdir -p "$dest/lib"
    for lib in "$@"; do
        path=$(/sbin/ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ { p = $NF } END { print p }')
        [ -n "$path" ] || { echo "pack: $lib not found" >&2; return 1; }
        cp -L "$path" "$dest/lib/$lib" || return 1
    done
}

# pack_llvm BUILD DEST LEVEL: libclshim-llvm.so with the libraries it links
# (the C runtime's left out) and libclc's NVPTX library, as DEST/llvm.tar.zst
# (zstd -LEVEL; unpacks to llvm/), and DEST/zstd to unpack it there.
pack_llvm() {
    local build=$1 dest=$2 level=$3 path
    rm -rf "$dest/llvm" && mkdir -p "$dest/llvm" || return 1
    cp "$build/libclshim-llvm.so" "$dest/llvm/" || return 1
    ldd "$build/libclshim-llvm.so" | awk '$3 ~ /^\// { print $3 }' |
        grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|ld-linux[^/]*)\.so' |
        while read -r path; do cp -L "$path" "$dest/llvm/" || exit 1; done || return 1
    cp /usr/lib/clc/nvptx64--nvidiacl.bc "$dest/llvm/" || return 1
    tar -C "$dest" -cf - llvm | zstd -q -T2 "-$level" -o "$dest/llvm.tar.zst" || return 1
    rm -rf "$dest/llvm"
    cp "$(command -v zstd)" "$dest/zstd"
}

# pack_done DEST NAME: DEST/REVISION says what was built (the machine's copy
# of the tree may carry older git metadata), and one line its size.
pack_done() {
    git -C "$PACK_ROOT" describe --always --dirty >"$1/REVISION" 2>/dev/null || echo '?' >"$1/REVISION"
    du -sh "$1" | awk -v n="$2" -v d="$1" '{ print n ": " $1 " in " d }'
}
