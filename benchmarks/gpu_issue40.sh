#!/usr/bin/env bash
# The GPU rows of issues 40, 62 and 59 in one bounded pass, run from the project's root on the GPU machine, after
# installing the carried wheels (../shared/device/wheels.sh fetches them into .whl/):
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl && \
#   COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_issue40.sh 2>&1 | tee $OUT/console.txt
#
# The default pass (issue 62 point 7) fits one 10-minute command with room: about 6 minutes on 16 cores.
# Stages (STAGES, default "tp pong"), each with its own time limit; key lines to stdout, the rest into $OUT/gpu40.tgz:
#   tp    throughput at ACTORS x EPA Breakout envs: the env ceiling, then the training rows of TP_ROWS side by side:
#           sync        synchronous, default collectors (issue 40's 0.62x row);
#           lag-k1      policy lag, one collector (issue 40's 0.75x row);
#           lag-kK      policy lag with K collector processes (K = COLLECTORS, default 4; issue 62 point 3);
#           lag-kK-seg  the same with run.segments (issue 62 point 2: T-step segments, a job-wide quota);
#         target (issue 62): >= 0.9x the ceiling with K collectors and lag;
#   pong  pong-fast with policy lag, to 20 or PONG_S seconds of training (issue 62: 20 within 60 s; the run's
#         agent steps/s against 15k: 64 envs, 16 actors x 4, as the file held until 2026-12-01; it holds 32 now);
#   cap   learner capacity with the network policy (K = 1 and 4 collectors; issue 40);
#   seeds pong-fast on SEEDS (e.g. 1-3) through benchmarks/learning_seeds.py, each to 20 or SEED_S seconds, the
#         multi-seed entry under results/ (issue 59 point 5; ~SEED_S + 40 s per seed: run it as its own pass,
#         STAGES=seeds SEEDS=1-3).
# env: DEV (cuda), ACTORS (16), EPA (32), ROW_SECONDS (25: measured seconds per throughput row at least; not
#      SECONDS, which is bash's own clock), ROLLOUTS (8), TP_ROWS ("sync lag-k4 lag-k4-seg"), COLLECTORS (4),
#      PONG_S (90), SEEDS (1-3), SEED_S (120), COMMIT (the commit measured; the machine's copy may have no .git),
#      PONG_LAG_SETS (stage pong's settings besides lag: the lag recipe that reached 20 at 729k steps on 2 cores,
#      docs/results/2026-11-28-2core-cpu-pong-fast-lag1-fresh-linear1e-3-seed1-run3/, on the file's 64 envs and 2 x 8
#      of then; "" for the file's own),
#      SEED_SETS (stage seeds' settings: "" for the file's own: 32 envs, 5 of 5 seeds to 20 on 2 cores)
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
DEV=${DEV:-cuda}; ACTORS=${ACTORS:-16}; EPA=${EPA:-32}; PONG_S=${PONG_S:-90}; SECONDS_ROW=${ROW_SECONDS:-25}
ROLLOUTS=${ROLLOUTS:-8}; STAGES=${STAGES:-"tp pong"}; COLLECTORS=${COLLECTORS:-4}
TP_ROWS=${TP_ROWS:-"sync lag-k$COLLECTORS lag-k$COLLECTORS-seg"}; SEEDS=${SEEDS:-1-3}; SEED_S=${SEED_S:-120}
SEED_SETS=${SEED_SETS-}
stage() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
PONG_LAG_SETS=${PONG_LAG_SETS-"--set cluster.envs=64 --set ppo.num_minibatches=8 --set ppo.lag_fresh_advantages=true --set ppo.lr_schedule=linear --set ppo.learning_rate=1e-3 --set ppo.lr_anneal_steps=1000000 --set ppo.ent_coef=0.001 --set ppo.ent_schedule=constant"}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
T0=$(date +%s); since() { echo $(( $(date +%s) - T0 )); }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
W=/tmp/gpu40; rm -rf $W; mkdir -p $W/results
{ date -u; nproc; echo "commit $COMMIT"; nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1
  python3 -c "import sys,torch,ale_py,zmq,pydantic,zstandard,gymnasium; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())"
} > $W/preflight.txt 2>&1; cat $W/preflight.txt

tp() {  # name, then launch.py settings
  local name=$1; shift
  local sets=(); for s in "$@"; do sets+=(--launch-set "$s"); done
  timeout 120 python3 benchmarks/throughput.py --rows training --no-sweep --actors "$ACTORS" --envs-per-actor "$EPA" \
    --seconds "$SECONDS_ROW" --rollouts "$ROLLOUTS" --skip 2 --row-timeout 100 --launch-set run.device="$DEV" "${sets[@]}" \
    --out $W/tp-$name.json > $W/tp-$name.log 2>&1
  echo "$name exit $? at $(since) s"; grep -E "steps/s|parked|serial|lag|collect" $W/tp-$name.log | head -10
}
tp_row() {  # one of TP_ROWS: sync, lag-kK, lag-kK-seg
  case $1 in
    sync) tp sync ;;
    lag-k*-seg) local k=${1#lag-k}; k=${k%-seg}; tp "$1" cluster.collectors="$k" run.policy_lag=1 run.segments=true ;;
    lag-k*) tp "$1" cluster.collectors="${1#lag-k}" run.policy_lag=1 ;;
    *) echo "unknown throughput row $1 (sync, lag-kK, lag-kK-seg)" ;;
  esac
}
if stage tp; then
  echo "== throughput at $(since) s"
  timeout 60 python3 benchmarks/throughput.py --rows ceiling --no-sweep --actors "$ACTORS" --envs-per-actor "$EPA" \
    --seconds 15 --out $W/tp-ceiling.json > $W/tp-ceiling.log 2>&1; grep -E "steps/s" $W/tp-ceiling.log | head -3
  for row in $TP_ROWS; do tp_row "$row"; done
fi

if stage pong; then
  echo "== pong-fast with policy lag at $(since) s"
  timeout $((PONG_S + 90)) python3 benchmarks/learning.py configs/pong-fast.toml --target 20 --max-steps 4000000 --seed 1 \
    --max-hours "$(python3 -c "print($PONG_S/3600)")" --eval-episodes 10 --run-dir $W/pong-lag --results $W/results \
    --hardware "h200" -- --device "$DEV" --set log.progress_bar=false --set run.policy_lag=1 --set cluster.collectors=1 \
    $PONG_LAG_SETS > $W/pong-lag.log 2>&1
  echo "pong-lag exit $? at $(since) s"; tail -4 $W/pong-lag.log
  [ -s $W/pong-lag/metrics.jsonl ] && python3 - $W/pong-lag/metrics.jsonl <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
late = [r["sps"] for r in rows[2:] if r.get("sps")]
if late:
    late.sort()
    print(f"pong-lag agent steps/s over {len(late)} updates after 2: median {late[len(late) // 2]:,.0f} (target 15,000)")
PY
fi

if stage cap; then
  echo "== capacity at $(since) s"
  timeout 110 python3 benchmarks/learner_capacity.py --device "$DEV" --policy network --envs-per-message 32 \
    --collectors 1,4 --actors 12 --seconds 8 --rollouts 6 --row-timeout 50 --out $W/capacity.json > $W/capacity.log 2>&1
  echo "capacity exit $? at $(since) s"; grep -E "steps/s" $W/capacity.log
fi
if stage seeds; then
  echo "== pong-fast seeds $SEEDS at $(since) s"
  n=$(python3 -c "import sys; a, _, b = sys.argv[1].partition('-'); print(len(range(int(a), int(b or a) + 1)) if '-' in sys.argv[1] else len(sys.argv[1].split(',')))" "$SEEDS")
  timeout $(( n * (SEED_S + 60) )) python3 benchmarks/learning_seeds.py configs/pong-fast.toml --name pong-fast-h200 \
    --seeds "$SEEDS" --parallel 1 --target 20 --max-steps 1500000 --marks 300000,600000,900000,1200000,1500000 \
    --max-hours "$(python3 -c "print($SEED_S/3600)")" --eval-episodes 5 --runs $W/seeds --results $W/results \
    -- --device "$DEV" --set log.progress_bar=false $SEED_SETS > $W/seeds.log 2>&1
  echo "seeds exit $? at $(since) s"; tail -12 $W/seeds.log
fi
echo "== done at $(since) s"
tar -czf "$OUT/gpu40.tgz" -C $W --exclude='*/checkpoints' --exclude='*/tb' . 2>/dev/null; ls -la "$OUT"
