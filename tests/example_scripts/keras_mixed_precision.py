"""A functional Keras model fitted with SGD; ``MIXED=1`` sets the mixed_float16 policy first,
under which compile() wraps the optimizer in a LossScaleOptimizer."""

import os

import keras
import numpy as np

if os.environ.get("MIXED") == "1":
    keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
inputs = keras.Input((8,))
outputs = keras.layers.Dense(1, dtype="float32")(keras.layers.Dense(16)(inputs))
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, x[:, :1], batch_size=16, epochs=1, verbose=0)
