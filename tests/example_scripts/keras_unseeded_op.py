"""A Keras model with a layer that adds ``tf.random.uniform`` noise (no seed= of its own), its
python, numpy and initializer seeds fixed: unless TF's global seed is set, the noise op takes
its seed from the OS and every run trains with other noise.

    [GLOBAL_SEED=S] python tests/example_scripts/keras_unseeded_op.py
"""

from __future__ import annotations

import os
import random

import keras
import numpy as np
import tensorflow as tf


class Noise(keras.layers.Layer):
    def call(self, x: tf.Tensor) -> tf.Tensor:
        return x + 0.01 * tf.random.uniform(tf.shape(x))


def main() -> None:
    random.seed(0)
    np.random.seed(0)
    if "GLOBAL_SEED" in os.environ:
        tf.random.set_seed(int(os.environ["GLOBAL_SEED"]))
    init = keras.initializers.GlorotUniform(seed=1)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, kernel_initializer=init),
            Noise(name="noise"),
            keras.layers.Dense(2, kernel_initializer=init),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.linspace(-1, 1, 32, dtype="float32").reshape(8, 4)
    model.fit(x, x[:, :2], batch_size=4, epochs=1, shuffle=False, verbose=0)


if __name__ == "__main__":
    main()
