#!/usr/bin/env bash
# Everything a GPU session measures against the GPU targets (benchmarks/gpu/gpu_targets.py), in one device call (device time is scarce: one start, one run):
#   bash benchmarks/gpu_session.sh                on the GPU machine, repo root ($OUT set by the device tool)
#   bash benchmarks/gpu_session.sh --cpu-dry-run  every stage on a tiny model on this CPU: the script is known to work
# At most GPU_SESSION_BUDGET_S seconds (530 on a GPU: 9 minutes less the packing; 470 for the dry run); every
# stage runs under its own time limit and is skipped when less than half of it is left. Stages, in priority order:
#   env            nvidia-smi, torch / triton / simpy versions
#   kernel-tests   the kernel tests compiled for the GPU (benchmarks/gpu/gpu_check.py --tests-only; on the CPU dry run
#                  one stage, `kernels`, runs both)
#   kernel-timings paged decode vs dense SDPA (one pass, split, tl.dot tiles) and varlen prefill vs SDPA
#                  (benchmarks/gpu/gpu_check.py --skip-tests --quick)
#   smoke          one Triton paged decode against its torch reference; on failure the later stages use the
#                  torch reference kernels (and eager decodes: graphs need Triton) and say so
#   graphs         graph-vs-eager equality and the one-sync check (tests/engine/runtime/test_runtime_cuda.py)
#   profile-a-*    profile + fit MODEL_A (OPT-13B) with CUDA graphs, then eager (benchmarks/gpu/gpu_calibrate.py)
#   validate-*     servesim validate VALIDATION_CONFIG at 2 rates x 5 systems x 2 real replays, each mode
#                  against its own fresh profile (simpy travels as a wheel in .whl/: the device image has none)
#   fig18a         paged vs dense decode attention at the paper's Fig. 18a shapes (benchmarks/gpu/fig18a_kernel.py)
#   profile-b-*    profile + fit MODEL_B (LLaMA-7B), both modes
#   targets        benchmarks/gpu/gpu_targets.py: every GPU target next to its floor (always runs)
# Everything lands in $RES (/tmp/gpu_session), packed into $OUT/gpu_session.tgz after every stage, so a stage
# that runs out of time still returns what the earlier ones measured; session.log and targets.txt are also
# copied to $OUT as they are.
#
# simpy for the validation stages: fill .whl/ before the session and carry it (it is git-ignored):
#   pip download simpy==4.1.2 --only-binary=:all: --no-deps -d .whl
set -u
DRY=0
case "${1:-}" in
  --cpu-dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: bash benchmarks/gpu_session.sh [--cpu-dry-run]" >&2; exit 2 ;;
esac
START=$(date +%s)
if (( DRY )); then
  BUDGET=${GPU_SESSION_BUDGET_S:-470}
  RES=${GPU_SESSION_RESULTS:-/tmp/gpu_session_dry}
  MODEL_A=${MODEL_A:-opt-tiny} MODEL_B=${MODEL_B:-llama-tiny}
  CAL_ARGS=(--grid tiny --repeats 1)
  # the GPU validation on the CPU: the same config, a tiny model in fp32, 1-s traces
  DRY_SET=(--set experiment.model="$MODEL_A" --set validation.device=cpu --set validation.dtype=float32
           --set experiment.dtype_bytes=4 --set experiment.workload.duration_s=0.5 --set validation.speed_probe_every_s=2)
  export OMP_NUM_THREADS=1  # a shared CPU: more threads only spin against each other
  NOTE="CPU DRY RUN on $(hostname): tiny models on a CPU; the numbers say the script works, not how fast a GPU is"
  LIMIT_PROFILE=60 LIMIT_VALIDATE=110
else
  BUDGET=${GPU_SESSION_BUDGET_S:-530}
  RES=${GPU_SESSION_RESULTS:-/tmp/gpu_session}
  MODEL_A=${MODEL_A:-opt-13b} MODEL_B=${MODEL_B:-llama-7b}
  CAL_ARGS=()
  DRY_SET=()
  NOTE="GPU session on $(hostname)"
  LIMIT_PROFILE=75 LIMIT_VALIDATE=150
fi
VALIDATION_CONFIG=${VALIDATION_CONFIG:-configs/validation/h200-opt-13b.yaml}
OUT=${OUT:-results/gpu_session_out}
rm -rf "$RES"
mkdir -p "$RES" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
BACKEND=auto
TARGETS_RESERVE=25  # seconds kept back for the targets stage

elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "== [$(elapsed)s] $*" | tee -a "$RES/session.log"; }
pack() {
  tar czf "$OUT/gpu_session.tgz.tmp" -C "$(dirname "$RES")" "$(basename "$RES")" && mv "$OUT/gpu_session.tgz.tmp" "$OUT/gpu_session.tgz"
  cp "$RES/session.log" "$OUT/session.log" 2>/dev/null
  [ -f "$RES/targets.txt" ] && cp "$RES/targets.txt" "$OUT/targets.txt"
  return 0
}
stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - TARGETS_RESERVE - $(elapsed) ))
  if (( left < limit / 2 )); then log "skip $name: ${left}s of the budget left, it needs up to ${limit}s"; return 1; fi
  (( limit > left )) && limit=$left
  log "start $name (limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  log "end $name: exit $rc$( (( rc == 124 )) && echo ' (timed out)')"
  tail -n 25 "$RES/$name.log"
  pack
  return $rc
}
profile_stage() {  # profile_stage NAME MODEL MODE LIMIT_S
  stage "$1" "$4" env OUT="$RES/profiles" python3 benchmarks/gpu/gpu_calibrate.py --models "$2" --backend "$BACKEND" \
    --cuda-graphs "$3" "${CAL_ARGS[@]}"
}
validate_stage() {  # validate_stage MODE LIMIT_S
  local mode=$1 flag=true profile
  [ "$mode" = eager ] && flag=false
  profile=$(ls "$RES"/profiles/*-"$MODEL_A"-"$mode".yaml 2>/dev/null | head -n 1)
  if [ -z "$profile" ]; then log "skip validate-$mode: no $MODEL_A $mode profile"; return 1; fi
  stage "validate-$mode" "$2" python3 -m servesim validate "$VALIDATION_CONFIG" --out "$RES/validation-$mode" \
    --set "experiment.cost_model=$profile" --set "validation.attention_backend=$BACKEND" \
    --set "engine.cuda_graphs=$flag" --set 'experiment.rates=[4,8]' --set validation.repeats=2 "${DRY_SET[@]}"
}

log "$NOTE; budget ${BUDGET}s; results in $RES"
if [ -d .whl ] && ! python3 -c "import simpy" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

if (( DRY )); then
  stage env 20 bash -c 'uname -a; lscpu | head -n 15; uptime; python3 -c "import torch; print(\"torch\", torch.__version__)"; python3 -c "import simpy; print(\"simpy\", simpy.__version__)"'
  stage kernels 90 env OUT="$RES/kernels" python3 benchmarks/gpu/gpu_check.py
  SMOKE_DEVICE=cpu
else
  stage env 20 bash -c 'nvidia-smi; python3 -c "import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__, torch.cuda.get_device_name())"; python3 -c "import simpy; print(\"simpy\", simpy.__version__)"'
  # the compiled tests and the timings apart: each sweep (partition sizes, tiles, tl.dot) needs its own budget
  stage kernel-tests 100 env OUT="$RES/kernels" python3 benchmarks/gpu/gpu_check.py --tests-only --workers 8 --test-timeout 90
  stage kernel-timings 90 env OUT="$RES/kernels" python3 benchmarks/gpu/gpu_check.py --skip-tests --quick
  SMOKE_DEVICE=cuda
fi
# on a CPU the Triton kernel runs in the interpreter, at a small shape
if ! stage smoke 60 env SMOKE_DEVICE=$SMOKE_DEVICE $( (( DRY )) && echo TRITON_INTERPRET=1 ) python3 - <<'EOF'
import os
import torch
from benchmarks.gpu.kernel_inputs import build_decode
from engine.kernels import paged_attention_decode, paged_attention_decode_ref
device = os.environ["SMOKE_DEVICE"]
dtype = torch.float16 if device == "cuda" else torch.float32
shape = (4, 300, 40, 128) if device == "cuda" else (2, 40, 4, 32)
paged, _ = build_decode(*shape, 16, dtype, device, seed=0)
got = paged_attention_decode(*paged, backend="triton")
want = paged_attention_decode_ref(*paged)
diff = float((got.float() - want.float()).abs().max())
print("triton vs reference max abs diff", diff)
assert diff < 1e-2
EOF
then
  BACKEND=torch
  log "Triton smoke test failed: the later stages use the torch reference kernels (and so run eager)"
fi
stage graphs 90 env SERVESIM_COMPILED=$(( 1 - DRY )) python3 -m pytest -q -rs -p no:cacheprovider \
  tests/engine/runtime/test_runtime_cuda.py tests/engine/runtime/test_runtime_graphs.py
profile_stage profile-a-graphs "$MODEL_A" on "$LIMIT_PROFILE"
validate_stage graphs "$LIMIT_VALIDATE"
profile_stage profile-a-eager "$MODEL_A" off "$LIMIT_PROFILE"
validate_stage eager $(( LIMIT_VALIDATE + 20 ))  # eager decodes take longer
if (( DRY )); then
  stage fig18a 40 python3 benchmarks/gpu/fig18a_kernel.py --device cpu --repeats 3
else
  stage fig18a 40 python3 benchmarks/gpu/fig18a_kernel.py
fi
profile_stage profile-b-graphs "$MODEL_B" on 60
profile_stage profile-b-eager "$MODEL_B" off 60
TARGETS_RESERVE=0
stage targets 25 python3 benchmarks/gpu/gpu_targets.py "$RES" --models "$MODEL_A" "$MODEL_B" --gemm --note "$NOTE"
cat "$RES/targets.txt" 2>/dev/null
log "done in $(elapsed)s"
pack
