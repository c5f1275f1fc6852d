#!/usr/bin/env bash
# commbench next to nccl-tests on a machine with NVIDIA GPUs (docs/NCCL_TESTS.md, "The GPU check").
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]       # OUT_DIR: the argument, else $OUT, else ./gpu_check_out
#   bash benchmarks/gpu_check.sh --dry-run       # what would be built and run, here; needs no GPU
#   bash benchmarks/gpu_check.sh --build-only    # build the three nccl-tests binaries and stop (nvcc; no GPU)
#
# Steps, each under `timeout`: nvidia-smi; nccl-tests' all_reduce_perf, all_gather_perf and
# reduce_scatter_perf built (MPI=0, one process drives every GPU) from a copy of their source; then,
# on the same sizes, commbench sweep and nccl-tests -J (each with NCCL_DEBUG=INFO: version and
# transport recorded), once as plain loops and once with CUDA graphs (sweep --cuda-graph, nccl-tests
# -G 1); `commbench nccl-tests side-by-side` for each pair (the ratio per collective and size,
# printed and stored as .txt, .csv, .md) and commbench's graph loop against its plain one; then the
# parallel groups of docs/LAYOUTS.md: `sweep --layout tp=2,dp=auto --group dp --solo` (every dp group
# at once on NCCL, each on a stream of its own, and each alone), on 4 GPUs or more; on 2-3 GPUs the one
# dp group of `--layout dp=auto`; skipped, with the reason, on one GPU.
# Everything lands under OUT_DIR/<UTC time>/; gpu_check.log holds the whole console output.
#
# Inputs, found in this order (benchmarks/gpu_prepare.sh puts them in .gpu/ on a machine with network):
#   nccl-tests source  NCCL_TESTS_SRC, .gpu/nccl-tests, shared/vendor/nccl-tests, ../shared/vendor/nccl-tests
#   nvcc               CUDA_HOME/bin/nvcc, nvcc on PATH, /usr/local/cuda, else the CUDA compiler wheels in .gpu/nvcc
#   NCCL to build on   NCCL_HOME, /usr/include/nccl.h, else the nvidia-nccl wheel torch uses
#   Python packages    .gpu/wheels/*.whl (those the machine's image lacks) into the run's own folder
# Knobs: PYTHON (python3), SIZES ("-b 8 -e 1G -f 4"), COLLECTIVES (all_reduce,all_gather,reduce_scatter),
#        STEP_TIMEOUT (90 s a measuring step), BUILD_TIMEOUT (240 s), CC (compute capability, e.g. 90,
#        when there is no GPU to ask), GPU_DEPS (.gpu).
# Exit: 0 when commbench's sweep ran (the verdicts are in the log and ratios*.txt); 1 when it did not
# or the build failed under --build-only; 2 on a bad argument or setting (one line on stderr).

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=run
OUT_ARG=""
bad() { echo "gpu_check.sh: $*" >&2; exit 2; }
usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --dry-run) MODE=dry ;;
        --build-only) MODE=build ;;
        -*) bad "unknown option $1: use --dry-run, --build-only, --help or an OUT_DIR" ;;
        *) [ -z "$OUT_ARG" ] || bad "one OUT_DIR only (got $OUT_ARG and $1)"; OUT_ARG=$1 ;;
    esac
    shift
done

PYTHON=${PYTHON:-python3}
STEP_TIMEOUT=${STEP_TIMEOUT:-90}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-240}
COLLECTIVES=${COLLECTIVES:-all_reduce,all_gather,reduce_scatter}
GPU_DEPS=${GPU_DEPS:-$REPO/.gpu}
read -r -a SIZES <<< "${SIZES:--b 8 -e 1G -f 4}"
for knob in STEP_TIMEOUT BUILD_TIMEOUT; do
    [[ ${!knob} =~ ^[1-9][0-9]*$ ]] || bad "$knob=${!knob} is not a whole number of seconds: e.g. $knob=120"
done
IFS=, read -r -a COLLS <<< "$COLLECTIVES"
for c in "${COLLS[@]}"; do
    case "$c" in all_reduce|all_gather|reduce_scatter) ;;
        *) bad "COLLECTIVES names $c: this check builds all_reduce, all_gather and reduce_scatter only" ;; esac
done
if [ -n "${NCCL_TESTS_SRC:-}" ] && [ ! -f "$NCCL_TESTS_SRC/src/Makefile" ]; then
    bad "NCCL_TESTS_SRC=$NCCL_TESTS_SRC is not an nccl-tests source tree (no src/Makefile): point it at one"
fi
[[ -z "${CC:-}" || $CC =~ ^[0-9]{2,3}$ ]] || bad "CC=$CC is not a compute capability: e.g. CC=90 for Hopper"

# ---- what this machine has --------------------------------------------------------------------------
find_source() {
    local d
    for d in "${NCCL_TESTS_SRC:-}" "$GPU_DEPS/nccl-tests" "$REPO/shared/vendor/nccl-tests" \
             "$REPO/../shared/vendor/nccl-tests"; do
        if [ -n "$d" ] && [ -f "$d/src/Makefile" ]; then (cd "$d" && pwd); return 0; fi
    done
    return 1
}
find_nvcc() {  # an nvcc that exists, or nothing (the wheels in $GPU_DEPS/nvcc are unpacked later)
    local n
    for n in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
        if [ -n "$n" ] && [ -x "$n" ]; then echo "$n"; return 0; fi
    done
    return 1
}
SRC=$(find_source || true)
NVCC=$(find_nvcc || true)
NGPUS=0
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
    NGPUS=$(nvidia-smi -L | grep -c '^GPU ' || true)
    CC=${CC:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n1 | tr -d ' .' || true)}
fi
NVCC_WHEELS=$(ls "$GPU_DEPS"/nvcc/*.whl 2> /dev/null | tr '\n' ' ' || true)
PY_WHEELS=$(ls "$GPU_DEPS"/wheels/*.whl 2> /dev/null | tr '\n' ' ' || true)
BINS=()
for c in "${COLLS[@]}"; do BINS+=("${c}_perf"); done

layout_case() {  # the parallel-groups case this machine allows, or why none (docs/LAYOUTS.md)
    if [ "$NGPUS" -ge 4 ]; then
        echo "sweep --layout tp=2,dp=auto --group dp --solo on $NGPUS GPUs ($((NGPUS / 2)) dp groups at once)"
    elif [ "$NGPUS" -ge 2 ]; then
        echo "sweep --layout dp=auto --group dp --solo on $NGPUS GPUs (tp=2 would leave dp groups of 1 rank)"
    else
        echo "skipped: ${NGPUS} GPU(s), and a group needs 2 ranks"
    fi
}

say_plan() {
    echo "commbench gpu_check ($MODE)"
    echo "  GPUs:              ${NGPUS} $( [ "$NGPUS" -gt 0 ] || echo '(no nvidia-smi or no GPU here: a run stops after the build)')"
    echo "  compute capability ${CC:-unknown (set CC=90 to build for Hopper)}"
    echo "  nccl-tests source  ${SRC:-none found (set NCCL_TESTS_SRC, or run benchmarks/gpu_prepare.sh)}"
    local nvcc_is="none (no nvcc here, no CUDA compiler wheels in $GPU_DEPS/nvcc)"
    if [ -n "$NVCC" ]; then nvcc_is=$NVCC; elif [ -n "$NVCC_WHEELS" ]; then nvcc_is="the wheels in $GPU_DEPS/nvcc"; fi
    echo "  nvcc               $nvcc_is"
    echo "  Python wheels      ${PY_WHEELS:-none in $GPU_DEPS/wheels}"
    echo "  binaries           ${BINS[*]} (MPI=0, -g $((NGPUS > 0 ? NGPUS : 1)))"
    echo "  sizes              ${SIZES[*]}; collectives $COLLECTIVES"
    echo "  runs               sweep, sweep --cuda-graph; each binary -J plain and -G 1; side-by-side of each pair"
    echo "  layout             $(layout_case)"
    echo "  limits             build ${BUILD_TIMEOUT}s, each measuring step ${STEP_TIMEOUT}s"
}
if [ "$MODE" = dry ]; then
    say_plan
    exit 0
fi

mkdir -p "${OUT_ARG:-${OUT:-./gpu_check_out}}"
RUN="$(cd "${OUT_ARG:-${OUT:-./gpu_check_out}}" && pwd)/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir "$RUN"
exec > >(tee -a "$RUN/gpu_check.log") 2>&1
say_plan
echo "  results            $RUN"

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it under timeout; say what ran, how long and how it ended
    local name=$1 limit=$2 rc=0 t0=$SECONDS
    shift 2
    echo
    echo "== $name (limit ${limit}s): $*"
    timeout --kill-after=15 "$limit" "$@" || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "== $name: timed out after ${limit}s"
    else
        echo "== $name: exit code $rc after $((SECONDS - t0))s"
    fi
    return "$rc"
}

# ---- 1. the build ------------------------------------------------------------------------------------
cuda_from_wheels() {  # unpack the CUDA compiler wheels into $RUN/cuda; print the CUDA_HOME they make
    local w home
    for w in $NVCC_WHEELS; do "$PYTHON" -m zipfile -e "$w" "$RUN/cuda" > /dev/null || return 1; done
    home=$(ls -d "$RUN"/cuda/nvidia/cu* 2> /dev/null | head -n1)
    [ -n "$home" ] && [ -x "$home/bin/nvcc" ] || return 1
    chmod +x "$home"/bin/* "$home"/nvvm/bin/* 2> /dev/null || true  # zipfile keeps no modes
    ln -sfn lib "$home/lib64"
    [ -e "$home/lib/libcudart.so" ] || ln -sf libcudart.so.13 "$home/lib/libcudart.so"
    echo "$home"
}

nccl_from_wheel() {  # print an NCCL_HOME (include/nccl.h, lib/libnccl.so) from the nvidia-nccl wheel torch uses
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

cuda_home_of() {  # the toolkit an nvcc belongs to (one with include/cuda_runtime.h); /usr/local/bin/nvcc may be a wrapper
    local d
    for d in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$1")")")" /usr/local/cuda; do
        if [ -n "$d" ] && [ -f "$d/include/cuda_runtime.h" ]; then echo "$d"; return 0; fi
    done
    return 1
}

build_nccl_tests() {  # the three binaries into $RUN/nccl-tests/build; sets BUILD and LD_LIBRARY_PATH
    local cuda_home nccl_home targets=()
    [ -n "$SRC" ] || { echo "no nccl-tests source: set NCCL_TESTS_SRC, or run benchmarks/gpu_prepare.sh first"; return 1; }
    if [ -n "$NVCC" ]; then
        cuda_home=$(cuda_home_of "$NVCC") || { echo "no CUDA headers beside $NVCC: set CUDA_HOME"; return 1; }
    elif [ -n "$NVCC_WHEELS" ]; then
        cuda_home=$(cuda_from_wheels) || { echo "the wheels in $GPU_DEPS/nvcc hold no nvcc"; return 1; }
    else
        echo "no nvcc here and no CUDA compiler wheels in $GPU_DEPS/nvcc (benchmarks/gpu_prepare.sh --nvcc 13.0)"
        return 1
    fi
    nccl_home=${NCCL_HOME:-}
    [ -n "$nccl_home" ] || { [ -f /usr/include/nccl.h ] && nccl_home=/usr; } || true
    [ -n "$nccl_home" ] || nccl_home=$(nccl_from_wheel) || {
        echo "no NCCL headers: set NCCL_HOME, or install the nvidia-nccl wheel torch was built with"; return 1; }
    echo "building with nvcc from $cuda_home against NCCL in $nccl_home for sm_${CC:-default}"
    cp -a "$SRC" "$RUN/nccl-tests" && chmod -R u+w "$RUN/nccl-tests" || return 1  # never build in the given tree
    for b in "${BINS[@]}"; do targets+=("../build/$b"); done
    step "build ${BINS[*]}" "$BUILD_TIMEOUT" make -C "$RUN/nccl-tests/src" -j "$(nproc)" MPI=0 \
        CUDA_HOME="$cuda_home" CUDA_LIB="$cuda_home/lib64" NCCL_HOME="$nccl_home" \
        ${CC:+NVCC_GENCODE="-gencode=arch=compute_$CC,code=sm_$CC"} os.build "${targets[@]}" || return 1
    export LD_LIBRARY_PATH="$nccl_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    BUILD="$RUN/nccl-tests/build"
}

BUILD=""
BUILT=1
build_nccl_tests || BUILT=0
if [ "$MODE" = build ]; then
    [ "$BUILT" = 1 ] && ls -l "$BUILD" | grep _perf
    [ "$BUILT" = 1 ]
    exit
fi

# ---- 2. the GPUs, Python, commbench ------------------------------------------------------------------
[ "$NGPUS" -gt 0 ] || { echo "no GPU here (nvidia-smi): nothing to measure"; exit 1; }
step "nvidia-smi" 60 nvidia-smi | tee "$RUN/nvidia-smi.txt" || true
if [ -n "$PY_WHEELS" ]; then  # packages the image lacks (duckdb for compare, pyroute2 for NIC counters)
    # shellcheck disable=SC2086
    step "wheels from $GPU_DEPS/wheels" 120 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile \
        --target "$RUN/site" $PY_WHEELS || true
fi
export PYTHONPATH="$REPO${PY_WHEELS:+:$RUN/site}${PYTHONPATH:+:$PYTHONPATH}"
CB=("$PYTHON" -m commbench)
if ! step "python, torch, commbench" 120 "$PYTHON" -c '
import sys, torch, commbench
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count(), "nccl", ".".join(map(str, torch.cuda.nccl.version())),
      "commbench", commbench.__version__)
assert torch.cuda.is_available(), "this torch sees no GPU (a CPU build?)"'; then
    echo "commbench needs the CUDA build of torch and its own requirements on this machine"
    exit 1
fi

# ---- 3. side by side: plain loops, then CUDA graphs --------------------------------------------------
SWEEP_OK=1
measure() {  # measure TAG SWEEP_FLAG NCCL_TESTS_FLAG...: commbench sweep and every binary, then side-by-side
    local tag=$1 flag=$2 b
    shift 2
    step "commbench sweep $tag" "$STEP_TIMEOUT" "${CB[@]}" sweep --backend nccl --collective "$COLLECTIVES" \
        "${SIZES[@]}" --nccl-debug $flag --label "gpu-check $tag" --progress off \
        --out "$RUN/commbench-$tag.parquet" || { [ "$tag" = plain ] && SWEEP_OK=0; return 0; }
    [ "$BUILT" = 1 ] || return 0
    mkdir -p "$RUN/nccl-tests-$tag"
    for b in "${BINS[@]}"; do
        step "nccl-tests $b $tag" "$STEP_TIMEOUT" env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,TUNING \
            "${CB[@]}" nccl-tests run --timeout "$((STEP_TIMEOUT - 10))" --label "gpu-check $tag" \
            --out "$RUN/nccl-tests-$tag/$b.parquet" "$BUILD/$b" -- "${SIZES[@]}" -g "$NGPUS" "$@" || true
    done
    for fmt in table:txt csv:csv markdown:md; do
        "${CB[@]}" nccl-tests side-by-side "$RUN/commbench-$tag.parquet" "$RUN/nccl-tests-$tag" \
            --format "${fmt%%:*}" --out "$RUN/ratios-$tag.${fmt##*:}" > /dev/null 2>&1 || true
    done
    step "side by side, $tag" 60 cat "$RUN/ratios-$tag.txt" || true
}
measure plain ""
measure graph --cuda-graph -G 1
if [ -f "$RUN/commbench-graph.parquet" ]; then
    step "commbench: CUDA graph loop against the plain loop" 120 "${CB[@]}" compare --allow-within-run \
        "$RUN/commbench-plain.parquet" "$RUN/commbench-graph.parquet" --out "$RUN/graph-vs-plain.txt" || true
    cat "$RUN/graph-vs-plain.txt" 2> /dev/null || true
fi

# ---- 4. parallel groups (docs/LAYOUTS.md): every dp group at once, and each alone ------------------
LAYOUT=()
if [ "$NGPUS" -ge 4 ]; then LAYOUT=(--layout tp=2,dp=auto); elif [ "$NGPUS" -ge 2 ]; then LAYOUT=(--layout dp=auto); fi
if [ "${#LAYOUT[@]}" -gt 0 ]; then
    step "commbench sweep ${LAYOUT[*]} --group dp --solo" "$STEP_TIMEOUT" "${CB[@]}" sweep --backend nccl \
        --nproc "$NGPUS" "${LAYOUT[@]}" --group dp --solo -b 1M -e 256M -f 4 --label "gpu-check layout" \
        --progress off --out "$RUN/commbench-layout.parquet" || true
else
    echo "== layout: $(layout_case)"
fi

echo
echo "commbench gpu_check: sweep $([ "$SWEEP_OK" = 1 ] && echo ran || echo FAILED), nccl-tests" \
     "$([ "$BUILT" = 1 ] && echo built || echo 'not built'); $((SECONDS))s in all"
echo "results: $RUN"
[ "$SWEEP_OK" = 1 ]
