"""A Dense without activation whose output a residual Add reads, trained by fit: grappler fuses
the bias add with the Add in an unrecorded run; a probe between them keeps them apart."""

import keras
import numpy as np

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 8)).astype("float32")
y = rng.normal(size=(64, 1)).astype("float32")
inputs = keras.Input((8,))
hidden = keras.layers.Add()([keras.layers.Dense(8)(inputs), inputs])
model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
