#!/usr/bin/env bash
# commbench on a machine with NVIDIA GPUs: commbench's own NCCL sweep, then nccl-tests' all_reduce_perf
# with the same sizes, and commbench busbw / nccl-tests busbw per size.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]         # OUT_DIR: $1, else $OUT, else ./gpu_check_out
#   NCCL_TESTS_SRC=/path/to/nccl-tests bash benchmarks/gpu_check.sh    # build all_reduce_perf from a local copy
#   NCCL_TESTS_BIN=/opt/nccl-tests/build/all_reduce_perf bash benchmarks/gpu_check.sh   # or use a built one
#
# Everything is written under OUT_DIR/<UTC time>/ (gpu_check.log has the whole console output):
#   nvidia-smi.txt, commbench.parquet (+ its NCCL debug files), nccl-tests.parquet (+ .log, .json),
#   busbw.txt. Every step runs under `timeout` (STEP_TIMEOUT, default 600 s; the nccl-tests build
#   BUILD_TIMEOUT, default 1200 s). Nothing is downloaded except what pip fetches for commbench's own
#   requirements and the nvidia-nccl wheel, both skipped quietly when the machine is offline; nccl-tests
#   itself is never fetched (give NCCL_TESTS_SRC or NCCL_TESTS_BIN).
#
# Knobs: PYTHON (python3), SIZES ("-b 8 -e 1G -f 4"), COLLECTIVES (all_reduce,all_gather,reduce_scatter),
#        NCCL_HOME (an NCCL with include/ and lib/), CUDA_HOME (where nvcc lives), SKIP_INSTALL=1.
# Exit: 0 when commbench's sweep ran (nccl-tests may be skipped, with a message), 1 otherwise.

set -euo pipefail

OUT_DIR=${1:-${OUT:-./gpu_check_out}}
STEP_TIMEOUT=${STEP_TIMEOUT:-600}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-1200}
PYTHON=${PYTHON:-python3}
COLLECTIVES=${COLLECTIVES:-all_reduce,all_gather,reduce_scatter}
read -r -a SIZES <<< "${SIZES:--b 8 -e 1G -f 4}"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

mkdir -p "$OUT_DIR"
RUN="$(cd "$OUT_DIR" && pwd)/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir "$RUN"
exec > >(tee -a "$RUN/gpu_check.log") 2>&1
echo "commbench gpu_check: results in $RUN"

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it under timeout, say what ran and how it ended
    local name=$1 limit=$2 rc=0
    shift 2
    echo
    echo "== $name (limit ${limit}s): $*"
    timeout --kill-after=30 "$limit" "$@" || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "== $name: timed out after ${limit}s"
    elif [ "$rc" -ne 0 ]; then
        echo "== $name: exit code $rc"
    fi
    return "$rc"
}

# ---- 1. the GPUs ------------------------------------------------------------------------------------
if ! command -v nvidia-smi > /dev/null; then
    echo "no nvidia-smi here: this script is for a machine with NVIDIA GPUs and their driver"
    exit 1
fi
step "nvidia-smi" 60 nvidia-smi | tee "$RUN/nvidia-smi.txt"
step "nvidia-smi topo -m" 60 nvidia-smi topo -m | tee -a "$RUN/nvidia-smi.txt" || true
NGPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n1 | tr -d ' .' || true)
echo "GPUs: $NGPUS (compute capability ${CC:-unknown})"

# ---- 2. Python, the machine's torch, commbench ------------------------------------------------------
if ! step "python and torch" 120 "$PYTHON" -c '
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "gpus", torch.cuda.device_count(),
      "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")
assert torch.cuda.is_available(), "this torch sees no GPU (a CPU build?)"'; then
    echo "commbench needs the CUDA build of torch for this machine: install it first (see pytorch.org)"
    exit 1
fi

CB=("$PYTHON" -m commbench)
PIP_QUICK=(--retries 1 --timeout 15 --disable-pip-version-check)
if [ "${SKIP_INSTALL:-0}" = 1 ]; then
    echo "SKIP_INSTALL=1: using commbench from $REPO"
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
elif step "pip install -e $REPO (keeps this machine's torch)" "$STEP_TIMEOUT" \
        "$PYTHON" -m pip install "${PIP_QUICK[@]}" -e "$REPO"; then
    :
elif step "pip install -e $REPO --no-deps (offline)" "$STEP_TIMEOUT" \
        "$PYTHON" -m pip install "${PIP_QUICK[@]}" --no-deps --no-build-isolation -e "$REPO"; then
    :
else
    echo "pip could not install commbench: running it from $REPO (PYTHONPATH)"
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi
step "commbench --version" 120 "${CB[@]}" --version

# ---- 3. commbench's own sweep over NCCL -------------------------------------------------------------
SWEEP_OK=1
step "commbench sweep (NCCL, $NGPUS ranks)" "$STEP_TIMEOUT" "${CB[@]}" sweep --backend nccl \
    --collective "$COLLECTIVES" "${SIZES[@]}" --nccl-debug --label gpu-check --out "$RUN/commbench.parquet" \
    || SWEEP_OK=0

# ---- 4. nccl-tests all_reduce_perf, same sizes ------------------------------------------------------
nccl_home_from_wheel() {  # print an NCCL_HOME (include/, lib/libnccl.so) made from the nvidia-nccl wheel
    local dir
    dir=$("$PYTHON" -c '
import importlib.util
spec = importlib.util.find_spec("nvidia.nccl")
print(list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else "")' 2> /dev/null) || return 1
    [ -n "$dir" ] && [ -f "$dir/include/nccl.h" ] && [ -e "$dir/lib/libnccl.so.2" ] || return 1
    mkdir -p "$RUN/nccl/lib"
    ln -sfn "$dir/include" "$RUN/nccl/include"
    ln -sf "$dir/lib/libnccl.so.2" "$RUN/nccl/lib/libnccl.so"
    ln -sf "$dir/lib/libnccl.so.2" "$RUN/nccl/lib/libnccl.so.2"
    echo "$RUN/nccl"
}

build_nccl_tests() {  # build all_reduce_perf from NCCL_TESTS_SRC into $RUN; sets BIN and LD_LIBRARY_PATH
    local nvcc cuda_home cuda_major nccl_home gencode
    nvcc=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
    if [ ! -x "$nvcc" ]; then
        echo "no nvcc (not on PATH, not in \${CUDA_HOME:-/usr/local/cuda}/bin): cannot build nccl-tests"
        return 1
    fi
    cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$nvcc")")}
    cuda_major=$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p')
    nccl_home=${NCCL_HOME:-}
    if [ -z "$nccl_home" ] && [ -f /usr/include/nccl.h ]; then
        nccl_home=/usr
    fi
    if [ -z "$nccl_home" ]; then
        if ! nccl_home=$(nccl_home_from_wheel); then
            step "pip install nvidia-nccl-cu$cuda_major" "$STEP_TIMEOUT" \
                "$PYTHON" -m pip install "${PIP_QUICK[@]}" "nvidia-nccl-cu$cuda_major" || true
            if ! nccl_home=$(nccl_home_from_wheel); then
                echo "no NCCL headers and library (set NCCL_HOME, or pip install nvidia-nccl-cu$cuda_major)"
                return 1
            fi
        fi
    fi
    echo "NCCL for the build: $nccl_home; CUDA $cuda_major at $cuda_home"
    gencode=""
    if [ -n "$CC" ]; then
        gencode="-gencode=arch=compute_$CC,code=sm_$CC"
    fi
    cp -a "$NCCL_TESTS_SRC" "$RUN/nccl-tests-src" || return 1  # never build inside the given tree
    step "build nccl-tests (MPI=0, one process drives all $NGPUS GPUs)" "$BUILD_TIMEOUT" \
        make -C "$RUN/nccl-tests-src" -j "$(nproc)" MPI=0 CUDA_HOME="$cuda_home" NCCL_HOME="$nccl_home" \
        ${gencode:+NVCC_GENCODE="$gencode"} || return 1
    export LD_LIBRARY_PATH="$nccl_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    BIN="$RUN/nccl-tests-src/build/all_reduce_perf"
}

NT_OK=0
BIN=${NCCL_TESTS_BIN:-}
if [ -z "$BIN" ]; then
    for c in "$(command -v all_reduce_perf || true)" /opt/nccl-tests/build/all_reduce_perf \
             /usr/local/nccl-tests/build/all_reduce_perf /workspace/nccl-tests/build/all_reduce_perf; do
        if [ -n "$c" ] && [ -x "$c" ]; then
            BIN=$c
            break
        fi
    done
fi
if [ -z "$BIN" ] && [ -n "${NCCL_TESTS_SRC:-}" ]; then
    if [ -d "$NCCL_TESTS_SRC" ]; then
        build_nccl_tests || BIN=""
    else
        echo "NCCL_TESTS_SRC=$NCCL_TESTS_SRC is not a folder"
    fi
fi
if [ -z "$BIN" ]; then
    echo
    echo "== nccl-tests: skipped. No all_reduce_perf here and none built: nccl-tests cannot be downloaded on"
    echo "   this machine. Copy its source here and set NCCL_TESTS_SRC=/path/to/nccl-tests (needs nvcc), or"
    echo "   set NCCL_TESTS_BIN=/path/to/all_reduce_perf."
elif step "nccl-tests $BIN (NCCL_DEBUG=INFO, TUNING: the transport and NCCL's algorithm are recorded)" "$STEP_TIMEOUT" \
        env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,TUNING "${CB[@]}" nccl-tests run --timeout "$((STEP_TIMEOUT - 60))" --label gpu-check \
        --out "$RUN/nccl-tests.parquet" "$BIN" -- "${SIZES[@]}" -g "$NGPUS"; then
    NT_OK=1
fi

# ---- 5. commbench busbw / nccl-tests busbw per size -------------------------------------------------
if [ "$SWEEP_OK" = 1 ]; then
    step "busbw per size" 120 "$PYTHON" - "$RUN/commbench.parquet" "$RUN/nccl-tests.parquet" << 'EOF' | tee "$RUN/busbw.txt"
import os
import sys

import pandas as pd

cb = pd.read_parquet(sys.argv[1])
nt = pd.read_parquet(sys.argv[2]) if os.path.exists(sys.argv[2]) else None
print(f"commbench: {cb.world_size.iloc[0]} ranks, {cb.device_name.iloc[0]}, NCCL {cb.nccl_version.iloc[0]}, "
      f"transport {cb.transport.iloc[0] if 'transport' in cb else None}")
if nt is not None:
    print(f"nccl-tests: {nt.world_size.iloc[0]} ranks, NCCL {nt.nccl_version.iloc[0]}, "
          f"transport {nt.transport.iloc[0]}")
# one rank: busbw is 0 by definition (factor 2(n-1)/n), so compare algbw there
metric = "busbw_GBps" if cb.world_size.iloc[0] > 1 else "algbw_GBps"
print(f"(GB/s, {metric.split('_')[0]}; medians over rows)")
print(f"{'collective':<15}{'size':>12} {'place':<6}{'commbench':>12}{'nccl-tests':>12}{'ratio':>8}  NCCL's choice")
for (coll, size, inplace), g in cb.groupby(["collective", "size_bytes", "in_place"]):
    mine = g[metric].median()
    theirs = float("nan")
    if nt is not None:
        t = nt[(nt.collective == coll) & (nt.size_bytes == size) & (nt.in_place == inplace)]
        theirs = t[metric].median() if len(t) else float("nan")
    ratio = mine / theirs if theirs == theirs and theirs > 0 else float("nan")
    place = "in" if inplace else "out"
    # the algorithm and protocol NCCL chose (--nccl-debug's TUNING lines; docs/NCCL_TESTS.md)
    chose = "/".join(str(g[c].iloc[0]) for c in ("nccl_algo", "nccl_proto") if c in g)
    print(f"{coll:<15}{size:>12} {place:<6}{mine:>12.3f}{theirs:>12.3f}{ratio:>8.3f}  {chose}")
EOF
fi

echo
echo "commbench gpu_check: sweep $([ "$SWEEP_OK" = 1 ] && echo ran || echo FAILED), nccl-tests" \
     "$([ "$NT_OK" = 1 ] && echo ran || echo 'did not run')"
echo "results: $RUN"
[ "$SWEEP_OK" = 1 ]
