"""A Keras model whose ``train_step`` draws noise from a ``SeedGenerator`` of its own and feeds
it to a sub-model it calls (a GAN's generator), for tests/tensorflow/test_evaluation.py.

    NOISE_SEED=S python keras_noise.py     (default 3; from the environment, as a config
                                            file would give it: the command lines are equal)
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf


class Noisy(keras.Model):
    """Fits ``decoder`` to map noise to the data (the outer model is never called)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.decoder = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)]
        )
        self.noise = keras.random.SeedGenerator(seed)

    def train_step(self, data: tf.Tensor) -> dict[str, tf.Tensor]:
        z = keras.random.normal((tf.shape(data)[0], 3), seed=self.noise)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self.decoder(z, training=True) - data) ** 2)
        variables = self.decoder.trainable_variables
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return {"loss": loss}


def main() -> None:
    keras.utils.set_random_seed(0)
    data = np.random.default_rng(0).standard_normal((32, 2)).astype("float32")
    model = Noisy(int(os.environ.get("NOISE_SEED", "3")))
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    model.fit(data, batch_size=16, epochs=1, shuffle=False, verbose=0)


if __name__ == "__main__":
    main()
