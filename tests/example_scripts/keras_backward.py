"""A Keras model whose backward differs between runs in its middle, for
tests/tensorflow/test_backward_order.py.

    python keras_backward.py {eager,traced,fit} [--scale S]

Three Dense layers and, between the second and the third, an identity layer whose gradient is
multiplied by ``--scale`` (the forward is unchanged): with ``S != 1`` the runs differ from the
backward of that layer on, so the gradients of the first two Dense layers differ and the last
one's match. eager: a GradientTape loop; traced: the same step in a tf.function; fit: model.fit.
"""

from __future__ import annotations

import argparse

import keras
import numpy as np
import tensorflow as tf


class GradientScale(keras.layers.Layer):
    """Identity forward; the backward multiplies the gradient by ``scale``."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def call(self, x: tf.Tensor) -> tf.Tensor:
        scale = self.scale

        @tf.custom_gradient
        def identity(t: tf.Tensor) -> tuple[tf.Tensor, object]:
            return tf.identity(t), lambda dy: dy * scale

        return identity(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("loop", choices=("eager", "traced", "fit"))
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(5, activation="tanh"),
            keras.layers.Dense(3, activation="tanh"),
            GradientScale(args.scale),
            keras.layers.Dense(2),
        ]
    )
    optimizer = keras.optimizers.SGD(0.1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 4)).astype(np.float32)
    y = rng.standard_normal((24, 2)).astype(np.float32)
    if args.loop == "fit":
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return

    def step(xb: tf.Tensor, yb: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb) - yb) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    run = tf.function(step) if args.loop == "traced" else step
    for start in range(0, 24, 8):
        run(tf.constant(x[start : start + 8]), tf.constant(y[start : start + 8]))


if __name__ == "__main__":
    main()
