"""A Keras fit with validation data and EarlyStopping (patience 0): ``MIN_DELTA`` set high stops
it after fewer epochs, cleanly (exit status 0), inside the step a validation pass closes.
``RESTORE=1`` gives the callback ``restore_best_weights=True``: the fit ends with the weights
of its best epoch written back; ``IN_MAIN=1`` fits in a ``main()`` that returns (the model is
freed before the program ends); ``EVALUATE=1`` evaluates the model after the fit (on the weights
restored); ``WEIGHTS=path`` saves the final weights (``.npz``)."""

import gc
import os

import keras
import numpy as np


def main() -> keras.Model:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 6)).astype("float32")
    y = rng.normal(size=(48, 1)).astype("float32")
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    stop = keras.callbacks.EarlyStopping(
        monitor="val_loss",
        patience=0,
        min_delta=float(os.environ.get("MIN_DELTA", "0")),
        restore_best_weights=os.environ.get("RESTORE") == "1",
    )
    model.fit(
        x[:32], y[:32], validation_data=(x[32:], y[32:]), batch_size=16, epochs=6, verbose=0,
        callbacks=[stop],
    )  # fmt: skip
    if os.environ.get("EVALUATE") == "1":
        model.evaluate(x[32:], y[32:], batch_size=16, verbose=0)
    if os.environ.get("WEIGHTS"):
        np.savez(os.environ["WEIGHTS"], *model.get_weights())
    return model


if os.environ.get("IN_MAIN") == "1":
    main()
    gc.collect()  # (the model's reference cycles: freed now, not at some later point)
else:
    model = main()
