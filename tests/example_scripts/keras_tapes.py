"""Keras custom loops whose gradients the recorder cannot pair with one tape.gradient() of the
code that applies them, for tests/tensorflow/test_tape_gradients.py.

    python keras_tapes.py {persistent,split} [--scale S]

persistent: one persistent tape, tape.gradient() twice (loss and a regulariser), the sum applied
  eagerly; --scale multiplies the regulariser's gradient, not its value (a backward difference, no
  edit).
split: the tape runs inside a tf.function that returns the gradients; they are clipped and
  applied eagerly; --scale sets the clip norm.
"""

from __future__ import annotations

import argparse

import keras
import numpy as np
import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern", choices=("persistent", "split"))
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = tf.constant(rng.standard_normal((8, 4)).astype(np.float32))
        if args.pattern == "persistent":
            with tf.GradientTape(persistent=True) as tape:
                out = model(x)
                loss = tf.reduce_mean(out**2)
                penalty = tf.reduce_sum(model.trainable_variables[0] ** 2)
                # the same value, its gradient times --scale: a backward-only difference
                regulariser = penalty + (args.scale - 1.0) * (penalty - tf.stop_gradient(penalty))
            grads = tape.gradient(loss, model.trainable_variables)
            extra = tape.gradient(regulariser, model.trainable_variables)
            grads = [g if e is None else g + e for g, e in zip(grads, extra, strict=True)]
        else:
            grads = gradients(model, x)
            grads, _ = tf.clip_by_global_norm(grads, 0.05 * args.scale)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


@tf.function
def gradients(model: keras.Model, x: tf.Tensor) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x) ** 2)
    return tape.gradient(loss, model.trainable_variables)


if __name__ == "__main__":
    main()
