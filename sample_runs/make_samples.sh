#!/usr/bin/env bash
# Regenerate the bundled run pairs in sample_runs/ (see sample_runs/README.md). Needs `diverge`
# on PATH (make install). Every pair is two real recordings of sample_runs/train.py.
set -euo pipefail
cd "$(dirname "$0")"
STEPS=${STEPS:-8}
rec() { local out=$1; shift; diverge record --force -o "$out" -- python train.py --steps "$STEPS" --log-every 100 "$@" >/dev/null; }

export OMP_NUM_THREADS=2
rec identical/a
rec identical/b
OMP_NUM_THREADS=1 rec threads/a
OMP_NUM_THREADS=2 rec threads/b
rec init/a --unseeded-init
rec init/b --unseeded-init
rec data_order/a --shuffle unseeded
rec data_order/b --shuffle unseeded
rec truncated/a
# killed by SIGKILL after step 4: the run stays readable up to its last completed step
diverge record --force -o truncated/b -- python train.py --steps "$STEPS" --log-every 100 \
    --kill-after-step 5 >/dev/null 2>&1 || test $? -eq 137
du -sh .
