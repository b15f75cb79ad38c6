"""A functional Keras model with two named inputs and two named outputs, fitted with dicts of
inputs, targets and sample weights, for tests/tensorflow/test_keyed_records.py.

    [CLS_WEIGHT_40=W] python keras_two_outputs.py
        the sample weight of sample 40 for the ``cls`` output (default 1; from the
        environment, as a config file would give it: the command lines are equal)
"""

from __future__ import annotations

import os

import keras
import numpy as np


def main() -> None:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = {"in_a": rng.normal(size=(64, 4)), "in_b": rng.normal(size=(64, 3))}
    y = {"reg": rng.normal(size=(64, 1)), "cls": rng.integers(0, 2, size=(64, 1))}
    cls_weight = np.ones(64, "float32")
    cls_weight[40] = float(os.environ.get("CLS_WEIGHT_40", "1"))
    in_a, in_b = keras.Input((4,), name="in_a"), keras.Input((3,), name="in_b")
    hidden = keras.layers.Concatenate()(
        [keras.layers.Dense(8, activation="relu")(in_a), keras.layers.Dense(8)(in_b)]
    )
    outputs = {
        "reg": keras.layers.Dense(1, name="reg")(hidden),
        "cls": keras.layers.Dense(1, activation="sigmoid", name="cls")(hidden),
    }
    model = keras.Model({"in_a": in_a, "in_b": in_b}, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2), loss={"reg": "mse", "cls": "binary_crossentropy"}
    )
    weights = {"reg": np.ones(64, "float32"), "cls": cls_weight}
    model.fit(
        {k: v.astype("float32") for k, v in x.items()},
        {k: v.astype("float32") for k, v in y.items()},
        sample_weight=weights,
        batch_size=16,
        epochs=1,
        verbose=0,
        shuffle=False,
    )


if __name__ == "__main__":
    main()
