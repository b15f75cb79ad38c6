"""Which environment variables a run file holds (its ``env`` metadata): those that change
numerics, generator streams or which kernels run, never a secret. The recorder writes them,
compare compares them.

>>> matters("OMP_NUM_THREADS"), matters("TF_TOKEN_registry"), matters("HOME")
(True, False, False)
"""

from __future__ import annotations

# Environment variables that change numerics, RNG streams, or which kernels run (KNOWLEDGE.md).
ENV_EXACT = (
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_TF32_OVERRIDE",
    "KMP_AFFINITY",
    "GOMP_CPU_AFFINITY",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
ENV_PREFIXES = ("TF_", "NCCL_", "HOROVOD_", "TORCH_", "CUDNN_", "XLA_", "KERAS_")
# Terraform shares TensorFlow's ``TF_`` prefix: its settings change no numerics, would show as
# environment differences between machines, and ``TF_TOKEN_*`` / ``TF_VAR_*`` hold secrets.
TERRAFORM = ("TF_VAR_", "TF_CLI_", "TF_LOG", "TF_TOKEN_", "TF_REGISTRY_", "TF_PLUGIN_")
TERRAFORM_EXACT = frozenset(
    {"TF_DATA_DIR", "TF_WORKSPACE", "TF_IN_AUTOMATION", "TF_INPUT", "TF_IGNORE"}
    | {"TF_APPEND_USER_AGENT", "TF_STATE_PERSIST_INTERVAL"}
)
# Never written to a run file, whatever the prefix: a secret cannot change a tensor.
SECRET_WORDS = (
    *("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH"),
    *("API_KEY", "ACCESS_KEY", "PRIVATE_KEY"),
)


def matters(name: str) -> bool:
    """Whether an environment variable is recorded (and compared)."""
    if name in ENV_EXACT:
        return True
    if not name.startswith(ENV_PREFIXES) or any(word in name for word in SECRET_WORDS):
        return False
    return not (name.startswith(TERRAFORM) or name in TERRAFORM_EXACT)
