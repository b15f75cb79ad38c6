"""A tiny Keras 3 training on generated data (no downloads, a few seconds on a CPU).

Runs unmodified under ``diverge record``. Flags choose the model style, the training loop and
an optional planted divergence (the lowest bit of element 0 of the ``flip`` layer's output is
flipped at one training step, in-graph).

    python train_keras.py --model functional --loop fit --jit --flip-step 2 --save w.npz
"""

from __future__ import annotations

import argparse
import os
import random
import time

import keras
import numpy as np
import tensorflow as tf

FEATURES, CLASSES, BATCH = 16, 4, 32


class FlipAt(keras.layers.Layer):
    """Identity, except at training call ``step`` (counted in-graph) where the lowest bit of
    element 0 is flipped. Gradients pass through unchanged."""

    def __init__(self, step: int = -1, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.step = step

    def build(self, input_shape: tuple[int, ...]) -> None:
        self.calls = self.add_weight(
            shape=(), dtype="int64", initializer="zeros", trainable=False, name="calls"
        )

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        if not training:
            return x
        hit = tf.equal(self.calls, self.step)
        self.calls.assign_add(1)
        return _flip_first_bit(x, hit)


@tf.custom_gradient
def _flip_first_bit(x: tf.Tensor, hit: tf.Tensor) -> tuple[tf.Tensor, object]:
    bits = tf.bitcast(x, tf.int32)
    mask = tf.reshape(
        tf.one_hot(0, tf.size(bits), on_value=1, off_value=0, dtype=tf.int32), tf.shape(bits)
    )
    flipped = tf.bitcast(tf.bitwise.bitwise_xor(bits, mask), x.dtype)
    out = tf.where(hit, flipped, x)
    return out, lambda upstream: (upstream, None)


class Block(keras.layers.Layer):
    """A nested layer with two sublayers (tests nested names)."""

    def __init__(self, units: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(units, activation="relu")
        self.norm = keras.layers.LayerNormalization()

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.norm(self.inner(x))


class Classifier(keras.Model):
    """The subclassed variant of the same network."""

    def __init__(self, flip_step: int) -> None:
        super().__init__()
        self.first = keras.layers.Dense(32)
        self.flip = FlipAt(flip_step, name="flip")
        self.block = Block(32)
        self.head = keras.layers.Dense(CLASSES, activation="softmax")

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        return self.head(self.block(self.flip(self.first(x), training=training)))


def build(style: str, flip_step: int) -> keras.Model:
    if style == "subclassed":
        model = Classifier(flip_step)
        model.build((None, FEATURES))
        return model
    if style == "sequential":
        return keras.Sequential([
            keras.Input((FEATURES,)),
            keras.layers.Dense(32),
            FlipAt(flip_step, name="flip"),
            Block(32),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ])  # fmt: skip
    inputs = keras.Input((FEATURES,))
    x = keras.layers.Dense(32)(inputs)  # linear: element 0 of the flip input is not 0
    x = FlipAt(flip_step, name="flip")(x)
    momentum = float(os.environ.get("TRAIN_BN_MOMENTUM", "0.99"))  # (a config)
    x = keras.layers.BatchNormalization(momentum=momentum)(x)
    x = Block(32)(x)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, activation="softmax")(x))


def nondeterministic_dataset(x: np.ndarray, y: np.ndarray) -> tf.data.Dataset:
    """Batches from four shards read by a parallel interleave with ``deterministic=False``:
    elements come out in the order the readers deliver them, and a tiny random delay per element
    (as real I/O latency gives) makes that order differ on every run. (A parallel ``map`` with
    ``deterministic=False`` kept its order here: the interleave is what reorders.)"""

    def jitter(a: tf.Tensor) -> tf.Tensor:
        time.sleep(random.random() / 500)  # latency only: the model never sees this randomness
        return a

    def load(xi: tf.Tensor, yi: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        xi = tf.py_function(jitter, [xi], tf.float32)
        xi.set_shape([FEATURES])
        return xi, yi

    def shard(index: tf.Tensor) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices((x, y)).shard(4, index).map(load)

    shards = tf.data.Dataset.range(4)
    mixed = shards.interleave(shard, cycle_length=4, num_parallel_calls=4, deterministic=False)
    return mixed.batch(BATCH)


class LearningRateDrop(keras.callbacks.Callback):
    """Sets the learning rate to ``lr / 10`` before training batch ``step`` (as a scheduler
    would)."""

    def __init__(self, step: int, lr: float) -> None:
        super().__init__()
        self.step, self.lr = step, lr

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        if batch == self.step:
            self.model.optimizer.learning_rate = self.lr / 10


def data(steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((steps * BATCH, FEATURES)).astype(np.float32)
    y = (x[:, :CLASSES].argmax(axis=1)).astype(np.int64)
    return x, y


def train_with_tape(model: keras.Model, x: np.ndarray, y: np.ndarray, args: argparse.Namespace):
    if args.momentum:
        optimizer = keras.optimizers.SGD(args.lr, momentum=args.momentum)
    else:
        optimizer = keras.optimizers.Adam(args.lr)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    clip_norm = args.clip_norm or float(os.environ.get("TRAIN_CLIP_NORM", "0"))  # (a config)

    def step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        if clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    if args.loop == "tape":
        step = tf.function(step, jit_compile=args.jit)
    for i in range(args.steps):
        if i == args.lr_drop_step:
            optimizer.learning_rate = args.lr / 10
        step(
            tf.constant(x[i * BATCH : (i + 1) * BATCH]), tf.constant(y[i * BATCH : (i + 1) * BATCH])
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", choices=("sequential", "functional", "subclassed"), default="functional"
    )
    parser.add_argument(
        "--loop",
        choices=("fit", "tape", "eager"),
        default="fit",
        help="model.fit, a @tf.function GradientTape step, or an eager one",
    )
    parser.add_argument("--jit", action="store_true", help="jit_compile=True (XLA)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    parser.add_argument(
        "--flip-step",
        type=int,
        default=int(os.environ.get("TRAIN_FLIP_STEP", "-1")),  # (a plant the argv does not show)
        help="the training step whose flip layer flips a bit (or TRAIN_FLIP_STEP)",
    )
    parser.add_argument("--relabel", action="store_true", help="another label for example 0")
    parser.add_argument("--class-weight", action="store_true", help="class 0 weighs twice")
    parser.add_argument(
        "--clip-norm",
        type=float,
        help="tape loops: clip_by_global_norm (or TRAIN_CLIP_NORM)",
    )
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's learning rate")
    parser.add_argument(
        "--momentum", type=float, default=0.0, help="tape loops: SGD with this momentum, not Adam"
    )
    parser.add_argument("--lr-drop-step", type=int, default=-1, help="lr / 10 from this step")
    parser.add_argument("--save", help="write the final weights to this .npz")
    parser.add_argument(
        "--warmup",
        action="store_true",
        help="build a throwaway model first: Keras' auto-numbered names shift",
    )
    parser.add_argument(
        "--tfdata-nondeterministic",
        action="store_true",
        help="feed fit from tf.data with map(..., deterministic=False): differs on every run",
    )
    args = parser.parse_args()

    if args.warmup:
        inputs = keras.Input((3,))
        keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(2)(inputs)))
    keras.utils.set_random_seed(0)
    x, y = data(args.steps)
    if args.relabel:
        y[0] = (y[0] + 1) % CLASSES
    model = build(args.model, args.flip_step)
    if args.loop == "fit":
        model.compile(
            optimizer=keras.optimizers.Adam(args.lr),
            loss="sparse_categorical_crossentropy",
            jit_compile=args.jit,
            steps_per_execution=args.steps_per_execution,
        )
        if args.tfdata_nondeterministic:
            model.fit(nondeterministic_dataset(x, y), epochs=1, verbose=0)
        else:
            callbacks = (
                [LearningRateDrop(args.lr_drop_step, args.lr)] if args.lr_drop_step >= 0 else []
            )
            weights = {c: 2.0 if c == 0 else 1.0 for c in range(CLASSES)}
            model.fit(
                x,
                y,
                batch_size=BATCH,
                epochs=1,
                shuffle=False,
                verbose=0,
                callbacks=callbacks,
                class_weight=weights if args.class_weight else None,
            )
    else:
        train_with_tape(model, x, y, args)
    if args.save:
        np.savez(args.save, *[np.asarray(v) for v in model.variables])


if __name__ == "__main__":
    main()
