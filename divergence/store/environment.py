"""Which environment variables a run file holds (its ``env`` metadata): an allowlist of those
that change numerics, generator streams or which kernels run. Every other variable is left
out, whatever its name, so that no credential reaches a run file; a kept value that holds a
URL's credentials has them redacted. The recorder writes these, compare compares them.

>>> matters("OMP_NUM_THREADS"), matters("NCCL_KEY"), matters("TF_ENCRYPTION_KEY"), matters("HOME")
(True, False, False, False)
>>> redacted("tcp://user:pw@10.0.0.1:29500"), redacted("user:pw@host"), redacted("Ring")
('tcp://***@10.0.0.1:29500', '***@host', 'Ring')
"""

from __future__ import annotations

import re

# By family; the knowledge base (compare/knowledge.toml) names causes by these variables.
THREADS = (
    *("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_DYNAMIC", "MKL_DYNAMIC"),
    *("TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS"),
    *("KMP_AFFINITY", "GOMP_CPU_AFFINITY", "OMP_PROC_BIND", "OMP_PLACES"),
)
ISA = (
    *("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"),
    *("ATEN_CPU_CAPABILITY", "TF_ENABLE_ONEDNN_OPTS"),
)
DETERMINISM = (
    *("CUBLAS_WORKSPACE_CONFIG", "CUDA_LAUNCH_BLOCKING", "NVIDIA_TF32_OVERRIDE"),
    *("TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC", "TF_CUDNN_USE_AUTOTUNE"),
    *("TF_ENABLE_AUTO_MIXED_PRECISION", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "PYTHONHASHSEED"),
)
COMPILERS = (
    *("XLA_FLAGS", "TF_XLA_FLAGS", "TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE"),
    *("KERAS_BACKEND", "TF_USE_LEGACY_KERAS"),
)
PROCESSES = ("CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
NCCL = (
    *("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_NTHREADS"),
    *("NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_BUFFSIZE", "NCCL_TREE_THRESHOLD"),
    *("NCCL_LL_THRESHOLD", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE"),
    *("NCCL_IB_DISABLE", "NCCL_NET", "NCCL_CROSS_NIC", "NCCL_COLLNET_ENABLE", "NCCL_NVLS_ENABLE"),
)
HOROVOD = (
    *("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY"),
    *("HOROVOD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLGATHER"),
    *("HOROVOD_BATCH_D2D_MEMCOPIES",),
)
KEPT = frozenset((*THREADS, *ISA, *DETERMINISM, *COMPILERS, *PROCESSES, *NCCL, *HOROVOD))

# ``scheme://user:password@host`` or ``user:password@host``: the part before ``@``
_CREDENTIALS = re.compile(r"(^|://)[^\s/@:]+(:[^\s/@]*)?@")


def matters(name: str) -> bool:
    """Whether an environment variable is recorded (and compared): it is in :data:`KEPT`."""
    return name in KEPT


def redacted(value: str) -> str:
    """``value`` with the credentials of any URL in it replaced by ``***``."""
    return _CREDENTIALS.sub(lambda m: f"{m.group(1)}***@", value)
