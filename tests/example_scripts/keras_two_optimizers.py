"""Two Keras optimizers of one class updating in one traced step (Adam, Adam): the second's
learning rate is the argument. For tests/tensorflow/test_record_keras.py.

    python keras_two_optimizers.py 0.02
"""

import sys

import keras
import tensorflow as tf


def main(learning_rate: float) -> None:
    keras.utils.set_random_seed(0)
    g = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    d = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    first, second = keras.optimizers.Adam(0.01), keras.optimizers.Adam(learning_rate)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(d(g(x)) ** 2)
        grads = tape.gradient(loss, d.trainable_variables)
        first.apply_gradients(zip(grads, d.trainable_variables, strict=True))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((d(g(x)) - 1) ** 2)
        grads = tape.gradient(loss, g.trainable_variables)
        second.apply_gradients(zip(grads, g.trainable_variables, strict=True))

    for i in range(2):
        step(tf.ones((8, 4)) * i)


if __name__ == "__main__":  # pytest's doctest collection imports every module under tests/
    main(float(sys.argv[1]))
