"""A GradientTape loop training plain ``tf.Variable``s (no Keras layer) with a Keras optimizer
with momentum; ``--plant STEP`` nudges the prediction at that step.

    python keras_plain_variables.py [--plant 2] [--out weights.npz]
"""

from __future__ import annotations

import argparse


def main() -> None:
    import numpy as np
    import tensorflow as tf
    from tensorflow import keras

    parser = argparse.ArgumentParser()
    parser.add_argument("--plant", type=int, default=-1)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    tf.random.set_seed(0)
    data = np.random.RandomState(1)
    x = tf.constant(data.randn(64, 8).astype("float32"))
    y = tf.constant(data.randn(64, 1).astype("float32"))
    w = tf.Variable(tf.random.normal([8, 1], seed=1), name="w")
    b = tf.Variable(tf.zeros([1]), name="b")
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    for step in range(5):
        with tf.GradientTape() as tape:
            prediction = x @ w + b
            if step == args.plant:
                prediction = prediction + 1e-6
            loss = tf.reduce_mean((prediction - y) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b], strict=True))
    if args.out:
        np.savez(args.out, w=w.numpy(), b=b.numpy())


if __name__ == "__main__":
    main()
