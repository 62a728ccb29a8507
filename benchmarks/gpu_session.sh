#!/usr/bin/env bash
# The GPU checks of one lent session, as one command on the device machine (issue 40: the CUDA tests,
# every method's epoch against deterministic training at float32 and bfloat16 on LeNet-300-100 and on a
# resnet18 at 3x32x32, channels-last against the stored layout, the host synchronisations inside the
# steps). The machine has PyTorch and torchvision but no package index: the packages it lacks travel as
# wheels in .whl (ignored by git).
#
#   echo /.whl/ >> .git/info/exclude && bash benchmarks/gpu_session.sh --wheels     # once, here
#   then the device tool: run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=570)
#
# Each step has its own time limit, so one that hangs does not cost the others; the results land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--wheels" ]; then
    # the versions this project's CI installs (pure-Python wheels: any platform)
    exec python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
        pyro-ppl==1.9.2 pyro-api==0.1.2 torch-pruning==1.6.1 arviz==0.23.4 xarray-einstats==0.9.1 \
        h5netcdf==1.8.2 tomli-w==1.2.0
fi

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/gpu-session}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"

timeout 150 python3 -m pytest -o addopts="" -p no:cacheprovider --import-mode=importlib -q -m cuda tests/test_cuda.py \
    2>&1 | tail -20 | tee "$out/cuda_tests.txt"
for precision in float32 bfloat16; do
    timeout 100 python3 benchmarks/epoch.py --device cuda --json --rounds 2 --data synthetic --precision "$precision" \
        >"$out/lenet300_$precision.json"
    timeout 100 python3 benchmarks/epoch.py --device cuda --json --rounds 2 --network resnet18 --rows 10000 \
        --precision "$precision" >"$out/resnet18_$precision.json"
done
# channels-last (train.memory_format = "auto" on CUDA) against the layout as stored, at bfloat16
timeout 100 python3 benchmarks/epoch.py --device cuda --json --rounds 2 --network resnet18 --rows 10000 \
    --precision bfloat16 --memory-format contiguous >"$out/resnet18_bfloat16_contiguous.json"
timeout 120 python3 benchmarks/host_syncs.py --json >"$out/host_syncs.json"
tail -n +1 "$out"/*.json
