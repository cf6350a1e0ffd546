#!/usr/bin/env bash
# The learning table: several Atari games trained side by side on one machine, each its own local cluster
# (configs/atari-fast.toml with only env.env_id changed), each published by benchmarks/learning.py as a
# docs/results entry (summary.json, plot.png, metrics, config, log).
#
#   bash benchmarks/learning_table.sh                                   # the four games below, GPU, 2M steps
#   GAMES="Breakout Seaquest Enduro" TRAIN_S=900 bash benchmarks/learning_table.sh
#
# Settings (environment variables):
#   GAMES      ALE game names (ALE/<name>-v5)              default: BeamRider SpaceInvaders Qbert MsPacman
#   ACTORS     actor processes per game, ENVS envs each     default: 4 x 16 (4 games on 16 cores)
#   MAX_STEPS  agent steps per game                         default: 2000000
#   TRAIN_S    wall-time cap per game, seconds              default: 1200
#   DEVICE     torch device of the learners                 default: cuda
#   HARDWARE   label for the results folders (-<game> added) default: the device
#   RESULTS    where the entries go                         default: docs/results
#   RUNS       where the run directories go                 default: runs/table
# Measured on one H200 + 16 cores (docs/results/2026-11-26-h200-session44.md): four games side by side at
# about 3,900-4,100 agent steps/s each (the 16 cores full), so 2M steps take about 8.5 minutes per game.
set -u
cd "$(dirname "$0")/.."
GAMES=${GAMES:-"BeamRider SpaceInvaders Qbert MsPacman"}; ACTORS=${ACTORS:-4}; ENVS=${ENVS:-16}
MAX_STEPS=${MAX_STEPS:-2000000}; TRAIN_S=${TRAIN_S:-1200}; DEVICE=${DEVICE:-cuda}
HARDWARE=${HARDWARE:-$DEVICE}; RESULTS=${RESULTS:-docs/results}; RUNS=${RUNS:-runs/table}; PY=${PYTHON:-python3}
hours=$("$PY" -c "print($TRAIN_S / 3600)")
mkdir -p "$RUNS"
pids=()
for game in $GAMES; do
  name=$(echo "$game" | tr '[:upper:]' '[:lower:]')
  echo "$game: $RUNS/$name, log $RUNS/$name.log"
  "$PY" benchmarks/learning.py configs/atari-fast.toml --target 1e9 --max-steps "$MAX_STEPS" --seed 1 \
    --max-hours "$hours" --eval-episodes 0 --run-dir "$RUNS/$name" --results "$RESULTS" --hardware "$HARDWARE-$name" \
    -- --device "$DEVICE" --actors "$ACTORS" --envs-per-actor "$ENVS" --set "env.env_id=ALE/$game-v5" \
    --set log.progress_bar=false > "$RUNS/$name.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for game in $GAMES; do name=$(echo "$game" | tr '[:upper:]' '[:lower:]'); echo "== $game"; tail -2 "$RUNS/$name.log"; done
exit $status
