#!/usr/bin/env bash
# One GPU session, at most ~6.5 minutes: the GPU check, the step throughput benchmark on the GPU, and
# paper-settings bAbI-1 chain steps (IG-50 Recursive ROAR) of several processes at once on the one GPU.
#
#   bash bench/gpu_session.sh                       (on the GPU node, in the repo root; writes under $OUT)
#   GPU_SESSION_DRY=1 OUT=/tmp/out bash bench/gpu_session.sh   (a dry run here: CPU, tiny sizes, with
#                                                    mlflow, dvc, datasets and pyarrow made unimportable)
#
# Needs python3 with torch, lightning, torchmetrics, numpy, safetensors, transformers (gpu_check's
# transformer), pyyaml; not roar installed (PYTHONPATH=src), nor MLflow, DVC, datasets or pyarrow.
# Writes 8 files under $OUT: session.log, gpu_check.log, bench.log, bench.json, chains.jsonl,
# chains.log, nvidia_smi.csv, chains_summary.json. Each part has its own timeout (150 s, 70 s, 165 s, 20 s).
set -u
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
WORKERS=${WORKERS:-6}          # chains at once on the GPU
CHAIN_SECONDS=${CHAIN_SECONDS:-130}  # no chain step starts after this (per worker, from its start)
DEVICE=cuda
CHECK_ARGS=()
BENCH_ARGS=(--epochs 3 --ig-rows 2000)
CHAIN_ARGS=()
SLACK=1  # timeouts x SLACK (the dry run on a busy 2-core machine needs more)
if [ "${GPU_SESSION_DRY:-0}" = 1 ]; then
  DEVICE=cpu WORKERS=2 CHAIN_SECONDS=40
  CHECK_ARGS=(--device cpu --small)
  BENCH_ARGS=(--quick --ig-rows 60 --n-train 1000 --n-test 200)
  SLACK=4
  CHAIN_ARGS=(--n-train 400 --n-test 100 --epochs 2 --samples 4)
  block=$(mktemp -d)
  cat > "$block/sitecustomize.py" <<'EOF'
import sys
class _Blocked:
    """The GPU node has no mlflow, dvc, datasets (nor, maybe, pyarrow): importing one fails here too."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mlflow", "dvc", "datasets", "pyarrow"):
            raise ImportError(f"{name} blocked for the GPU session dry run")
sys.meta_path.insert(0, _Blocked())
EOF
  export PYTHONPATH="$block:$PYTHONPATH"
fi
log() { echo "[gpu_session $(date +%T)] $*" | tee -a "$OUT/session.log"; }
start=$(date +%s)
log "device $DEVICE, workers $WORKERS, chain budget ${CHAIN_SECONDS}s, $(nproc) cores; $($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1)"
$PY -c 'import mlflow' 2>/dev/null && log "note: mlflow importable" || log "mlflow not importable (as on the GPU node)"

SMI_PID=
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,memory.total,power.draw --format=csv -l 2 \
    > "$OUT/nvidia_smi.csv" 2>&1 &
  SMI_PID=$!
else
  echo "no nvidia-smi" > "$OUT/nvidia_smi.csv"
fi

log "1/3 gpu_check (timeout $((150 * SLACK)) s)"
timeout $((150 * SLACK)) $PY bench/gpu_check.py "${CHECK_ARGS[@]}" > "$OUT/gpu_check.log" 2>&1
log "gpu_check rc=$? after $(( $(date +%s) - start )) s"

log "2/3 step throughput benchmark on $DEVICE (timeout $((70 * SLACK)) s)"
timeout $((70 * SLACK)) $PY bench/bench_step_throughput.py --device "$DEVICE" "${BENCH_ARGS[@]}" --json "$OUT/bench.json" \
  > "$OUT/bench.log" 2>&1
log "bench rc=$? after $(( $(date +%s) - start )) s"

log "3/3 $WORKERS chains of paper-settings bAbI-1 steps at once (budget $CHAIN_SECONDS s, timeout $(((CHAIN_SECONDS + 35) * SLACK)) s)"
pids=()
for worker in $(seq 0 $((WORKERS - 1))); do
  timeout $(((CHAIN_SECONDS + 35) * SLACK)) $PY bench/gpu_chain_steps.py --worker "$worker" --seconds "$CHAIN_SECONDS" \
    --device "$DEVICE" --out "$OUT/chains.jsonl" "${CHAIN_ARGS[@]}" >> "$OUT/chains.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || log "a chain worker ended with rc=$?"; done
[ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
log "chains done after $(( $(date +%s) - start )) s"

timeout 20 $PY - "$OUT" "$WORKERS" <<'EOF' >> "$OUT/session.log" 2>&1
"""Summarise the chain steps: per-step seconds, rows/s, memory, and a study's GPU-hours from them."""
import csv, json, statistics, sys
from pathlib import Path
out, workers = Path(sys.argv[1]), int(sys.argv[2])
lines = [json.loads(l) for l in (out / "chains.jsonl").read_text().splitlines()] if (out / "chains.jsonl").exists() else []
steps = [l for l in lines if l["part"] == "train" and l["k"] > 0]
k0 = [l for l in lines if l["part"] == "train" and l["k"] == 0]
imp = [l for l in lines if l["part"] == "importance"]
med = lambda xs: statistics.median(xs) if xs else None
util, mem = [], []
try:
    for row in csv.reader((out / "nvidia_smi.csv").read_text().splitlines()[1:]):
        util.append(float(row[1].split()[0])); mem.append(float(row[2].split()[0]))
except (IndexError, ValueError):
    pass
step_s = med([s["step_s"] for s in steps])
# a paper-babi-1 study per importance target: 5 seeds x (5 recursive + 4 plain ROAR chains) x 9 steps,
# plus k = 0 and k = 100 per seed; every step costed like an IG-50 step (the dearest measure), run
# `workers` at once per GPU
study_steps = 5 * 9 * 9 + 2 * 5
summary = {
    "workers_at_once": workers, "k0_trainings": len(k0), "steps_done": len(steps), "importance_runs": len(imp),
    "median_step_s": step_s, "median_k0_train_s": med([s["seconds"] for s in k0]),
    "median_step_train_s": med([s["seconds"] for s in steps]), "median_epochs": med([s["epochs"] for s in steps + k0]),
    "median_ig_s": med([s["seconds"] for s in imp]), "median_ig_rows_per_s": med([s["ig_rows_per_s"] for s in imp]),
    "median_train_rows_per_s": med([s["train_rows_per_s"] for s in steps + k0]),
    "max_peak_mib_per_process": max([s["peak_mib"] or 0 for s in lines], default=None),
    "gpu_util_mean_pct": statistics.mean(util) if util else None, "gpu_mem_used_max_mib": max(mem, default=None),
    "study_steps_per_target": study_steps,
    "study_gpu_hours_per_target": study_steps * step_s / workers / 3600 if step_s else None,
}
(out / "chains_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary))
EOF
log "done in $(( $(date +%s) - start )) s; files: $(ls "$OUT" | tr '\n' ' ')"
