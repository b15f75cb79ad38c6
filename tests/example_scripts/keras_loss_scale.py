"""mixed_float16 with a LossScaleOptimizer around SGD with momentum, trained by fit: 8 batches,
the first steps overflow at the default initial scale (their update is skipped); ``SCALE`` sets
another ``initial_scale``. Prints a digest of the final weights."""

import hashlib
import os

import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
model = keras.Sequential(
    [
        keras.Input((8,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ]
)
optimizer = keras.optimizers.LossScaleOptimizer(
    keras.optimizers.SGD(0.05, momentum=0.9), initial_scale=float(os.environ.get("SCALE", "32768"))
)
model.compile(optimizer=optimizer, loss="mse")
rng = np.random.default_rng(0)
x = rng.normal(size=(128, 8)).astype("float32")
y = x[:, :1] * 3 - x[:, 1:2]
model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
weights = b"".join(w.tobytes() for w in model.get_weights())
print("WEIGHTS", hashlib.sha256(weights).hexdigest()[:16])
