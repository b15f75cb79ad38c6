"""A custom GradientTape loop (``TRACED=1``: its step in ``tf.function``) that keeps the weights
of its second step; ``RESTORE=1`` writes them back with ``set_weights()`` after the loop.
``HEAD=1`` also trains a head model with an optimizer of its own, applied after the model's
(an eager loop then records two steps per iteration: the model's update is never the last).
``DROPOUT=1`` puts a Dropout layer in the model (its seed generator's state changes in a call)."""

import os

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
y = x[:, :1] * 2
DROPOUT = [keras.layers.Dropout(0.5)] if os.environ.get("DROPOUT") == "1" else []
model = keras.Sequential(
    [keras.Input((4,)), keras.layers.Dense(3), *DROPOUT, keras.layers.Dense(1)]
)
head = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
HEAD = os.environ.get("HEAD") == "1"
opt, head_opt = keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1)


def step(xb, yb):
    with tf.GradientTape(persistent=True) as tape:
        out = head(model(xb, training=True)) if HEAD else model(xb, training=True)
        loss = tf.reduce_mean((out - yb) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    if HEAD:
        head_grads = tape.gradient(loss, head.trainable_variables)
        head_opt.apply_gradients(zip(head_grads, head.trainable_variables, strict=True))
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
