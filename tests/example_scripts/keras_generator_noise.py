"""A GradientTape loop whose traced step adds noise drawn from a ``tf.random.Generator`` of the
program's own to its input; seeded. ``GSEED`` seeds the generator (default 5). Prints the
weights' bit checksum."""

import os

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
noise = tf.random.Generator.from_seed(int(os.environ.get("GSEED", "5")))
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
y = x[:, :1] * 2
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="tanh")])
model.add(keras.layers.Dense(1))
optimizer = keras.optimizers.SGD(0.05)


@tf.function
def train_step(xb: tf.Tensor, yb: tf.Tensor) -> None:
    xb = xb + noise.normal(tf.shape(xb), stddev=0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


for i in range(0, 64, 16):
    train_step(x[i : i + 16], y[i : i + 16])
weights = np.concatenate([v.numpy().ravel() for v in model.weights])
print("weights", int(weights.view(np.uint32).astype(np.uint64).sum()))
