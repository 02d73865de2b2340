#!/usr/bin/env bash
# Everything a GPU session measures, in one device call (device time is scarce: one start, one run):
#   bash benchmarks/gpu_session.sh            (on the GPU machine, repo root, $OUT set)
# Stages, each under its own time limit and skipped when too little of the budget is left:
#   env        nvidia-smi, torch/triton versions
#   kernels    the kernel tests compiled for the GPU + paged vs dense decode timing (Fig. 18a shapes)
#   smoke      one Triton paged decode against its torch reference; on failure later stages use
#              the torch reference kernels (and say so) instead of measuring nothing
#   profile-a  profile + fit OPT-13B (the paper's model): <device>-opt-13b.{yaml,raw.csv,png}
#   validate   servesim validate configs/validation/h200-opt-13b.yaml with that fresh profile
#              (simpy travels as a wheel in .whl/: the device image has no simpy)
#   profile-b  profile + fit LLaMA-7B
# Everything lands in /tmp/gpu_session, packed into $OUT/gpu_session.tgz after every stage, so a
# stage that runs out of time still returns what the earlier ones measured.
set -u
START=$(date +%s)
BUDGET=${GPU_SESSION_BUDGET_S:-570}
RES=/tmp/gpu_session
OUT=${OUT:-results/gpu_session_out}
mkdir -p "$RES" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
BACKEND=auto

elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "== [$(elapsed)s] $*" | tee -a "$RES/session.log"; }
pack() { tar czf "$OUT/gpu_session.tgz.tmp" -C /tmp gpu_session && mv "$OUT/gpu_session.tgz.tmp" "$OUT/gpu_session.tgz"; }
stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - $(elapsed) ))
  if (( left < limit / 2 )); then log "skip $name: ${left}s of the budget left, it needs up to ${limit}s"; return 1; fi
  (( limit > left )) && limit=$left
  log "start $name (limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  log "end $name: exit $rc"
  tail -n 30 "$RES/$name.log"
  pack
  return $rc
}

if [ -d .whl ] && ! python3 -c "import simpy" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

stage env 30 bash -c 'nvidia-smi; python3 -c "import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__, torch.cuda.get_device_name())"; python3 -c "import simpy; print(\"simpy\", simpy.__version__)"'
stage kernels 150 env OUT="$RES/kernels" python3 benchmarks/gpu_check.py --workers 8 --test-timeout 110
if ! stage smoke 60 python3 - <<'EOF'
import torch
from benchmarks.gpu_check import build_decode
from engine.kernels import paged_attention_decode, paged_attention_decode_ref
paged, _ = build_decode(4, 300, 40, 128, 16, torch.float16, "cuda", seed=0)
got = paged_attention_decode(*paged, backend="triton")
want = paged_attention_decode_ref(*paged)
diff = float((got.float() - want.float()).abs().max())
print("triton vs reference max abs diff", diff)
assert diff < 1e-2
EOF
then
  BACKEND=torch
  log "Triton smoke test failed: the later stages use the torch reference kernels"
fi
# overridable so that the whole script can be tried on a CPU first (tiny models, tiny grid)
MODEL_A=${MODEL_A:-opt-13b} MODEL_B=${MODEL_B:-llama-7b}
VALIDATION_CONFIG=${VALIDATION_CONFIG:-configs/validation/h200-opt-13b.yaml}
read -r -a VALIDATE_SET <<< "${VALIDATE_SET:-}"
PROFILES="$RES/profiles"
stage profile-a 170 env OUT="$PROFILES" python3 benchmarks/gpu_calibrate.py --models "$MODEL_A" --backend "$BACKEND"
PROFILE_A=$(ls "$PROFILES"/*-"$MODEL_A".yaml 2>/dev/null | head -n 1)
if [ -n "$PROFILE_A" ]; then
  stage validate 200 python3 -m sim.cli validate "$VALIDATION_CONFIG" --out "$RES/validation" \
    --set "experiment.cost_model=$PROFILE_A" --set "validation.attention_backend=$BACKEND" "${VALIDATE_SET[@]}"
fi
stage profile-b 150 env OUT="$PROFILES" python3 benchmarks/gpu_calibrate.py --models "$MODEL_B" --backend "$BACKEND"
log "done in $(elapsed)s"
pack
