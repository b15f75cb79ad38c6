"""Versions, threads and determinism switches of torch, read without initialising CUDA."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch


def torch_metadata() -> dict[str, Any]:
    """E.g. ``{"framework": "torch", "versions": {...}, "threads": {...}, ...}``."""
    cuda_ready = torch.cuda.is_initialized()
    devices = []
    if cuda_ready:
        devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "framework": "torch",
        "versions": {
            "torch": torch.__version__,
            "numpy": np.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()
            if torch.backends.cudnn.is_available()
            else None,
        },
        "threads": {
            "torch.get_num_threads": torch.get_num_threads(),
            "torch.get_num_interop_threads": torch.get_num_interop_threads(),
            "os.cpu_count": os.cpu_count(),
        },
        "determinism": {
            "torch.are_deterministic_algorithms_enabled": (
                torch.are_deterministic_algorithms_enabled()
            ),
            "torch.is_deterministic_algorithms_warn_only_enabled": (
                torch.is_deterministic_algorithms_warn_only_enabled()
            ),
            "cudnn.deterministic": torch.backends.cudnn.deterministic,
            "cudnn.benchmark": torch.backends.cudnn.benchmark,
            "cudnn.enabled": torch.backends.cudnn.enabled,
            "mkldnn.enabled": torch.backends.mkldnn.enabled,
            "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        },
        "devices": {"cuda_initialized": cuda_ready, "cuda": devices},
    }
