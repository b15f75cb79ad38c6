"""Two fits of one model; ``LOAD_INITIAL=1`` loads the weights saved before the first fit in
between (as restoring a checkpoint does): the second fit starts from other weights.
``EVALUATE=1`` evaluates the model between the fits; ``RECOMPILE=1`` compiles it again with a
new optimizer before the second fit (as fine-tuning does); ``SHUFFLE=1`` fits with shuffle=True
(the others keep the data's order)."""

import os
import tempfile

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(32, 6)).astype("float32")
y = (x[:, :1] - x[:, 1:2]).astype("float32")
model = keras.Sequential(
    [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
SHUFFLE = os.environ.get("SHUFFLE") == "1"
saved = os.path.join(tempfile.mkdtemp(), "initial.weights.h5")
model.save_weights(saved)
model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=SHUFFLE)
if os.environ.get("LOAD_INITIAL") == "1":
    model.load_weights(saved)
if os.environ.get("EVALUATE") == "1":
    model.evaluate(x, y, batch_size=16, verbose=0)
if os.environ.get("RECOMPILE") == "1":
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=SHUFFLE)
