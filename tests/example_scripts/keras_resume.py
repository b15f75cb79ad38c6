"""Resuming a Keras training from a saved model that holds its optimizer's state (Adam after 4
steps), for tests/tensorflow/test_resume.py.

    python keras_resume.py --save m.keras      train 1 epoch and save model and optimizer
    [RECOMPILE=1] [WEIGHTS_OUT=W.npz] python keras_resume.py m.keras
                                               load, (compile again with a fresh Adam,) fit
(from the environment, as a config file would give them: the command lines are equal)
"""

from __future__ import annotations

import argparse
import os

import keras
import numpy as np


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    return x, x[:, :1] * 2 - x[:, 1:2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    x, y = data()
    if args.save:
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    else:
        model = keras.models.load_model(args.model)
        if os.environ.get("RECOMPILE"):
            model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    if args.save:
        model.save(args.model)
    if os.environ.get("WEIGHTS_OUT"):
        np.savez(os.environ["WEIGHTS_OUT"], *model.get_weights())


if __name__ == "__main__":
    main()
