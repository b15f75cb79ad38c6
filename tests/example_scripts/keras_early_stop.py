"""A Keras fit with validation data and EarlyStopping (patience 0): ``MIN_DELTA`` set high stops
it after fewer epochs, cleanly (exit status 0), inside the step a validation pass closes."""

import os

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(48, 6)).astype("float32")
y = rng.normal(size=(48, 1)).astype("float32")
model = keras.Sequential(
    [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
stop = keras.callbacks.EarlyStopping(
    monitor="val_loss", patience=0, min_delta=float(os.environ.get("MIN_DELTA", "0"))
)
model.fit(
    x[:32], y[:32], validation_data=(x[32:], y[32:]), batch_size=16, epochs=6, verbose=0,
    callbacks=[stop],
)  # fmt: skip
