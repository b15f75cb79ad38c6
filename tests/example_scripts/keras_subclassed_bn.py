"""A subclassed Keras model holding BatchNormalization, left unbuilt before ``fit`` (as such
models usually are): Keras builds its layers at their first call, inside the traced train step,
running them once in a scratch graph of its own. Seeded; prints the weights' bit checksum.

    python tests/example_scripts/keras_subclassed_bn.py [--lr LR] [--tape]

``--tape`` trains with a ``tf.function`` GradientTape loop instead of ``fit``.
"""

from __future__ import annotations

import argparse

import keras
import numpy as np
import tensorflow as tf


class Model(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(16)
        self.norm = keras.layers.BatchNormalization()
        self.head = keras.layers.Dense(1)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        return self.head(self.norm(self.dense(x), training=training))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--tape", action="store_true")
    args = p.parse_args()
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    y = x[:, :1]
    model = Model()
    optimizer = keras.optimizers.SGD(args.lr)
    if args.tape:

        @tf.function
        def train_step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        for _ in range(2):
            for i in range(0, 64, 16):
                train_step(x[i : i + 16], y[i : i + 16])
    else:
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    weights = np.concatenate([v.numpy().ravel() for v in model.weights])
    print("weights", int(weights.view(np.uint32).astype(np.uint64).sum()))


if __name__ == "__main__":
    main()
