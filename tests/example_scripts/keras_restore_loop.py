"""A custom GradientTape loop (``TRACED=1``: its step in ``tf.function``) that keeps the weights
of its second step; ``RESTORE=1`` writes them back with ``set_weights()`` after the loop."""

import os

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
y = x[:, :1] * 2
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.1)


def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(xb) - yb) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


if os.environ.get("TRACED") == "1":
    step = tf.function(step)
best = None
for i in range(4):
    step(x[i * 8 : (i + 1) * 8], y[i * 8 : (i + 1) * 8])
    if i == 1:
        best = model.get_weights()
if os.environ.get("RESTORE") == "1":
    model.set_weights(best)
