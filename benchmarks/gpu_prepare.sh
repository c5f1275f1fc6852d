#!/usr/bin/env bash
# Before benchmarks/gpu_check.sh, on a machine WITH network: put what a GPU machine without network
# needs into .gpu/ (git ignores it; copy it along, e.g. as a carried folder):
#
#   bash benchmarks/gpu_prepare.sh [--python 3.12] [--nvcc 13.0] [--no-wheels]
#
#   .gpu/nccl-tests   a copy of the nccl-tests source (NCCL_TESTS_SRC, else ../shared/vendor/nccl-tests)
#   .gpu/wheels       commbench requirements a CUDA image often lacks (duckdb: compare over parquet;
#                     pyroute2: NIC counters), built for --python (the GPU machine's, default 3.12)
#   .gpu/nvcc         with --nvcc X.Y: CUDA's compiler as wheels (nvidia-cuda-nvcc, -runtime, -crt,
#                     nvidia-nvvm == X.Y.*; match torch.version.cuda there), for a machine with no nvcc.
#                     About 100 MB: more than some transfer limits; leave it out where nvcc is installed.
# Exit 0; 2 on a bad argument; 1 when a download or the copy fails.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GPU_DEPS=${GPU_DEPS:-$REPO/.gpu}
PY=3.12
NVCC_VERSION=""
WHEELS=1
bad() { echo "gpu_prepare.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --python) [ $# -ge 2 ] || bad "--python needs a version, e.g. --python 3.12"; PY=$2; shift ;;
        --nvcc) [ $# -ge 2 ] || bad "--nvcc needs a CUDA version, e.g. --nvcc 13.0"; NVCC_VERSION=$2; shift ;;
        --no-wheels) WHEELS=0 ;;
        *) bad "unknown argument $1: use --python X.Y, --nvcc X.Y, --no-wheels or --help" ;;
    esac
    shift
done
[[ $PY =~ ^3\.[0-9]{1,2}$ ]] || bad "--python $PY is not a Python version like 3.12"
[[ -z $NVCC_VERSION || $NVCC_VERSION =~ ^[0-9]{2}\.[0-9]$ ]] || bad "--nvcc $NVCC_VERSION is not a CUDA version like 13.0"

SRC=${NCCL_TESTS_SRC:-$REPO/../shared/vendor/nccl-tests}
[ -f "$SRC/src/Makefile" ] || bad "no nccl-tests source at $SRC: set NCCL_TESTS_SRC to a copy of NVIDIA/nccl-tests"
mkdir -p "$GPU_DEPS"
[ ! -d "$GPU_DEPS/nccl-tests" ] || chmod -R u+w "$GPU_DEPS/nccl-tests"
rm -rf "$GPU_DEPS/nccl-tests"
cp -a "$SRC" "$GPU_DEPS/nccl-tests"
chmod -R u+w "$GPU_DEPS/nccl-tests"  # a vendored tree may be read-only; the copy is ours
rm -rf "$GPU_DEPS/nccl-tests/build"
echo "nccl-tests source: $SRC -> $GPU_DEPS/nccl-tests"

download() {  # download DIR REQUIREMENT...: binary wheels for the GPU machine's Python on x86-64 Linux
    local dir=$1
    shift
    rm -rf "$dir"
    mkdir -p "$dir"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
        -d "$dir" "$@"
}
if [ "$WHEELS" = 1 ]; then
    download "$GPU_DEPS/wheels" "duckdb>=1.4" "pyroute2>=0.9"
    echo "wheels for Python $PY: $(ls "$GPU_DEPS/wheels" | tr '\n' ' ')"
fi
if [ -n "$NVCC_VERSION" ]; then
    download "$GPU_DEPS/nvcc" "nvidia-cuda-nvcc==$NVCC_VERSION.*" "nvidia-cuda-runtime==$NVCC_VERSION.*" \
        "nvidia-cuda-crt==$NVCC_VERSION.*" "nvidia-nvvm==$NVCC_VERSION.*"
    echo "CUDA $NVCC_VERSION compiler wheels: $(ls "$GPU_DEPS/nvcc" | tr '\n' ' ')"
fi
echo "$(du -sh "$GPU_DEPS" | cut -f1) in $GPU_DEPS; then, on the GPU machine: bash benchmarks/gpu_check.sh OUT_DIR"
