"""Keras 3 on the torch backend (``KERAS_BACKEND=torch``, set here): a tiny Dense model trained
with ``fit``. Recorded through torch's hooks; the recorder says that this is all it sees.
``SUBCLASSED=1`` builds the model as a ``keras.Model`` subclass (built at its first call).
(Everything runs under ``main``: pytest imports this file to collect doctests.)"""

import os


def main() -> None:
    os.environ["KERAS_BACKEND"] = "torch"  # (before keras is imported)
    import keras
    import numpy as np

    keras.utils.set_random_seed(int(os.environ.get("SEED", "1")))
    x = np.random.default_rng(0).normal(size=(64, 6)).astype("float32")
    y = np.random.default_rng(1).integers(0, 3, 64)
    if os.environ.get("SUBCLASSED") == "1":

        class TwoDense(keras.Model):
            def __init__(self) -> None:
                super().__init__()
                self.hidden, self.out = keras.layers.Dense(8), keras.layers.Dense(3)

            def call(self, x):  # type: ignore[no-untyped-def]
                return self.out(self.hidden(x))

        model = TwoDense()
    else:
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), keras.layers.Dense(3)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=loss)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)


if __name__ == "__main__":
    main()
