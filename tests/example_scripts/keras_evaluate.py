"""Two Keras fits with an ``evaluate()`` between them, for tests/tensorflow/test_evaluation.py.

    python keras_evaluate.py {none,same}

none: no evaluate(); same: evaluate() on held-out data. The training is the same in every
variant. From the environment, as a config file would give them (the command lines stay equal):
SHIFT=1 changes one value of the held-out data; LOSS_WEIGHT=W compiles with loss_weights=W
(default 1.0).
"""

from __future__ import annotations

import os
import sys

import keras
import numpy as np


def main() -> None:
    variant = sys.argv[1]
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6)).astype("float32")
    y = (x[:, 0] > 0).astype("float32")
    held_out = rng.standard_normal((16, 6)).astype("float32")
    if os.environ.get("SHIFT"):
        held_out[0, 0] += 1.0
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )
    weight = float(os.environ.get("LOSS_WEIGHT", "1.0"))
    model.compile(optimizer="sgd", loss="mse", loss_weights=weight)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    if variant != "none":
        model.evaluate(held_out, held_out[:, 0], batch_size=16, verbose=0)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)


if __name__ == "__main__":
    main()
