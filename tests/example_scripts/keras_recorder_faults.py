"""A small seeded Keras fit that breaks its recorder from inside, for
tests/e2e/test_recorder_faults.py. Prints each epoch's loss, then a digest of the final weights.

    FAULT_STEP=N python keras_recorder_faults.py   # from step N, reading the fingerprints of
                                                   # a train step's probes raises

Unrecorded (no recorder in the process) the fault changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

import keras
import numpy as np

BATCH, SAMPLES, EPOCHS = 8, 32, 2


def planted(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("planted fault")


class BreakTheRecorder(keras.callbacks.Callback):
    """At step ``at``, makes the recorder's reading of the step's probes fail from then on."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.step = at, 0

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        functions: Any = sys.modules.get("divergence.frameworks.tensorflow.functions")
        if self.step == self.at and functions is not None:
            functions.finish = planted  # turns each probe's sum into a fingerprint
        self.step += 1


def main() -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    x = np.random.rand(SAMPLES, 4).astype("float32")
    y = np.sin(x.sum(axis=1, keepdims=True))
    fault = BreakTheRecorder(int(os.environ.get("FAULT_STEP", "-1")))
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[fault])
    for epoch, loss in enumerate(history.history["loss"]):
        print(f"epoch {epoch} loss {loss:.8f}")
    digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    print(f"final-weights {digest}")


if __name__ == "__main__":
    main()
