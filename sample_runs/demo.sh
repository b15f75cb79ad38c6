#!/usr/bin/env bash
# `make demo`: record two fresh runs of the sample script that really diverge (1 vs 2 CPU threads;
# where this CPU's kernels split their sums alike at both counts, two runs whose DataLoader
# shuffles unseeded), compare them, then compare the bundled pairs. Needs `diverge` on PATH (the
# Makefile sets it).
set -uo pipefail
cd "$(dirname "$0")/.."
out=demo_runs
rm -rf "$out"
banner() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

banner "Recording sample_runs/train.py with OMP_NUM_THREADS=1 and =2"
OMP_NUM_THREADS=1 diverge record -o "$out/threads1" -- python sample_runs/train.py --steps 10
OMP_NUM_THREADS=2 diverge record -o "$out/threads2" -- python sample_runs/train.py --steps 10
banner "diverge compare $out/threads1 $out/threads2"
diverge compare "$out/threads1" "$out/threads2"
status=$?
echo "(exit status $status: 1 = diverged)"
if [ "$status" -eq 0 ]; then
    # Whether a GEMM or a convolution splits its sums by thread count depends on the CPU and its
    # BLAS (the bundled threads pair below was recorded where it does): show a fresh divergence
    # that happens on every machine instead.
    echo "(this CPU gives the sample the same bits at 1 and 2 threads)"
    banner "Recording sample_runs/train.py twice with an unseeded DataLoader shuffle"
    for run in shuffle1 shuffle2; do
        diverge record -o "$out/$run" -- python sample_runs/train.py --steps 10 --shuffle unseeded
    done
    banner "diverge compare $out/shuffle1 $out/shuffle2"
    diverge compare "$out/shuffle1" "$out/shuffle2"
    echo "(exit status $?: 1 = diverged)"
fi

for pair in identical threads init data_order truncated; do
    banner "Bundled pair: diverge compare sample_runs/$pair/a sample_runs/$pair/b"
    diverge compare "sample_runs/$pair/a" "sample_runs/$pair/b"
    echo "(exit status $?)"
done
for pair in onednn tfdata flip; do
    banner "Bundled Keras pair: diverge compare sample_runs/keras/${pair}_a sample_runs/keras/${pair}_b"
    diverge compare "sample_runs/keras/${pair}_a" "sample_runs/keras/${pair}_b"
    echo "(exit status $?)"
done
banner "diverge info sample_runs/truncated/b"
diverge info sample_runs/truncated/b
exit 0
