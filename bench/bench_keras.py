"""Recording overhead of a Keras ``fit``: time per step recorded / unrecorded, in one process.

Rounds alternate plain and recorded fits of fresh, identical models (each traced and warmed up
first), so machine noise hits both; the ratio is the median over rounds. Prints one JSON line:

    {"name": "keras_fit_overhead", "ratio": 1.4, "plain_step_ms": ..., ...}

    python bench/bench_keras.py [--steps 40] [--rounds 5] [--jit] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
from common import emit

import divergence

FEATURES, WIDTH, DEPTH, CLASSES, BATCH = 128, 256, 4, 10, 64


def model(jit: bool) -> keras.Model:
    layers = [keras.Input((FEATURES,))]
    layers += [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
    net = keras.Sequential([*layers, keras.layers.Dense(CLASSES, activation="softmax")])
    net.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=jit)
    return net


def timed_fit(jit: bool, x: np.ndarray, y: np.ndarray) -> float:
    """Seconds per step of a fit, after a warm-up fit that traces the train function."""
    net = model(jit)
    net.fit(x[: 2 * BATCH], y[: 2 * BATCH], batch_size=BATCH, verbose=0, shuffle=False)
    start = time.perf_counter()
    net.fit(x, y, batch_size=BATCH, verbose=0, shuffle=False)
    return (time.perf_counter() - start) / (len(x) // BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jit", action="store_true", help="fit with jit_compile=True (XLA)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 20 steps")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds = 20, 2
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.steps * BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, len(x))
    plain, recorded = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            plain.append(timed_fit(args.jit, x, y))
            with divergence.Recorder(os.path.join(tmp, f"run{index}")):
                recorded.append(timed_fit(args.jit, x, y))
    ratios = [r / p for p, r in zip(plain, recorded, strict=True)]
    emit(
        "keras_fit_overhead" + ("_xla" if args.jit else ""),
        target="informational",
        met=None,
        ratio=statistics.median(ratios),
        detail={
            "plain_step_ms": round(1000 * statistics.median(plain), 3),
            "recorded_step_ms": round(1000 * statistics.median(recorded), 3),
            "ratios": [round(r, 3) for r in ratios],
            "steps": args.steps,
            "model": f"MLP {DEPTH}x{WIDTH}, batch {BATCH}, Adam",
        },
    )


if __name__ == "__main__":
    main()
