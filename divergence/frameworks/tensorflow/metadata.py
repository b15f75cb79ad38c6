"""Versions, threads, determinism switches and devices of TensorFlow/Keras, plus adapter notes.

Read without initialising anything new: ``list_physical_devices`` does not create the runtime.

>>> # tf_metadata(notes=["steps_per_execution=4: ..."])["framework"] -> "tensorflow"
"""

from __future__ import annotations

import os
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import config as tf_config


def _determinism() -> dict[str, Any]:
    return {
        "op_determinism": tf_config.is_op_determinism_enabled(),  # not exported
        "TF_DETERMINISTIC_OPS": os.environ.get("TF_DETERMINISTIC_OPS"),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "xla_jit_global": str(tf.config.optimizer.get_jit()),
        "keras_backend": keras.backend.backend(),
        "keras_floatx": keras.backend.floatx(),
        "keras_dtype_policy": str(keras.config.dtype_policy().name),
    }


def tf_metadata(notes: list[str] | None = None) -> dict[str, Any]:
    """E.g. ``{"framework": "tensorflow", "versions": {...}, "threads": {...}, ...}``."""
    build = tf.sysconfig.get_build_info()
    return {
        "framework": "tensorflow",
        "versions": {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "numpy": np.__version__,
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
        },
        "threads": {
            "intra_op_parallelism": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_parallelism": tf.config.threading.get_inter_op_parallelism_threads(),
            "os.cpu_count": os.cpu_count(),
        },
        "determinism": _determinism(),
        # TF's global seed as the first step starts (None: never set), read without drawing:
        # also one set before a `divergence.Recorder` started, or by tf.compat.v1
        "tf_global_seed": context.global_seed(),
        "devices": {
            "physical": [d.name for d in tf.config.list_physical_devices()],
            "gpu": [d.name for d in tf.config.list_physical_devices("GPU")],
        },
        "notes": list(notes or []),
    }
