"""A Keras fit whose custom layer branches with ``tf.cond`` inside the traced train step: at op
level its gradient graph once took the training down. Prints the final weights' digest.

    python keras_cond.py
"""

from __future__ import annotations

import hashlib

import keras
import numpy as np
import tensorflow as tf


class Gate(keras.layers.Layer):
    """Doubles a batch whose sum is positive, else shifts it down by one."""

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)


def main() -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3), Gate(), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.rand(16, 4).astype("float32")
    y = np.random.rand(16, 1).astype("float32")
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    print(f"final-weights {digest}")


if __name__ == "__main__":
    main()
