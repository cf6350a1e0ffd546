#!/usr/bin/env bash
# Issue 40's GPU rows in one bounded pass (458 s on an H200 + 16 cores on 2026-11-27), run from the project's root on
# the GPU machine, after installing the carried wheels (../shared/device/wheels.sh fetches them into .whl/):
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl && \
#   COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_issue40.sh 2>&1 | tee $OUT/console.txt
#
# Stages, each with its own time limit; key lines to stdout, the rest into $OUT/gpu40.tgz:
#   1. throughput at ACTORS x EPA Breakout envs: the env ceiling, then training two ways, side by side:
#      synchronous (default collectors) and policy lag with one collector (the update overlaps collection and
#      groups flow on once its weights serve: learner/collection/collector.py);
#   2. pong-fast with policy lag and one collector, to 20 or PONG_S seconds of training;
#   3. learner capacity with the network policy (K = 1 and 4 collectors).
# env: DEV (cuda), ACTORS (16), EPA (32), ROW_SECONDS (25: measured seconds per throughput row at least; not
#      SECONDS, which is bash's own clock), ROLLOUTS (8),
#      PONG_S (120), CAP (1: stage 3), COMMIT (the commit measured; the machine's copy may have no .git),
#      PONG_LAG_SETS (stage 2's settings besides lag: the lag recipe that reached 20 at 729k steps on 2 cores,
#      docs/results/2026-11-28-2core-cpu-pong-fast-lag1-fresh-linear1e-3-seed1-run3/; "" for the file's own)
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
DEV=${DEV:-cuda}; ACTORS=${ACTORS:-16}; EPA=${EPA:-32}; PONG_S=${PONG_S:-120}; SECONDS_ROW=${ROW_SECONDS:-25}
ROLLOUTS=${ROLLOUTS:-8}; CAP=${CAP:-1}
PONG_LAG_SETS=${PONG_LAG_SETS-"--set ppo.lag_fresh_advantages=true --set ppo.lr_schedule=linear --set ppo.learning_rate=1e-3 --set ppo.lr_anneal_steps=1000000"}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
T0=$(date +%s); since() { echo $(( $(date +%s) - T0 )); }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=/tmp/gpu40; rm -rf $W; mkdir -p $W/results
{ date -u; nproc; echo "commit $COMMIT"; nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1
  python3 -c "import sys,torch,ale_py,zmq,pydantic,zstandard,gymnasium; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())"
} > $W/preflight.txt 2>&1; cat $W/preflight.txt

echo "== throughput at $(since) s"
tp() {  # name, then launch.py settings
  local name=$1; shift
  local sets=(); for s in "$@"; do sets+=(--launch-set "$s"); done
  timeout 120 python3 benchmarks/throughput.py --rows training --no-sweep --actors "$ACTORS" --envs-per-actor "$EPA" \
    --seconds "$SECONDS_ROW" --rollouts "$ROLLOUTS" --skip 2 --row-timeout 100 --launch-set run.device="$DEV" "${sets[@]}" \
    --out $W/tp-$name.json > $W/tp-$name.log 2>&1
  echo "$name exit $? at $(since) s"; grep -E "steps/s|parked|serial|lag|collect" $W/tp-$name.log | head -10
}
timeout 60 python3 benchmarks/throughput.py --rows ceiling --no-sweep --actors "$ACTORS" --envs-per-actor "$EPA" \
  --seconds 15 --out $W/tp-ceiling.json > $W/tp-ceiling.log 2>&1; grep -E "steps/s" $W/tp-ceiling.log | head -3
tp sync
tp lag-k1 cluster.collectors=1 run.policy_lag=1

echo "== pong-fast with policy lag at $(since) s"
timeout $((PONG_S + 90)) python3 benchmarks/learning.py configs/pong-fast.toml --target 20 --max-steps 4000000 --seed 1 \
  --max-hours "$(python3 -c "print($PONG_S/3600)")" --eval-episodes 10 --run-dir $W/pong-lag --results $W/results \
  --hardware "h200" -- --device "$DEV" --set log.progress_bar=false --set run.policy_lag=1 --set cluster.collectors=1 \
  $PONG_LAG_SETS > $W/pong-lag.log 2>&1
echo "pong-lag exit $? at $(since) s"; tail -4 $W/pong-lag.log

if [ "$CAP" = 1 ]; then
  echo "== capacity at $(since) s"
  timeout 110 python3 benchmarks/learner_capacity.py --device "$DEV" --policy network --envs-per-message 32 \
    --collectors 1,4 --actors 12 --seconds 8 --rollouts 6 --row-timeout 50 --out $W/capacity.json > $W/capacity.log 2>&1
  echo "capacity exit $? at $(since) s"; grep -E "steps/s" $W/capacity.log
fi
echo "== done at $(since) s"
tar -czf "$OUT/gpu40.tgz" -C $W --exclude='*/checkpoints' --exclude='*/tb' . 2>/dev/null; ls -la "$OUT"
