"""What differs between the environments of two runs (shown before any tensor difference).

>>> environment_differences({"env": {"OMP_NUM_THREADS": "1"}}, {"env": {"OMP_NUM_THREADS": "2"}})
[EnvDifference(key='env.OMP_NUM_THREADS', a='1', b='2')]
"""

from __future__ import annotations

from typing import Any

from divergence.compare.model import EnvDifference

# Per-process facts that differ between any two runs and say nothing about bits.
IGNORED = frozenset(
    {"host", "pid", "cwd", "start_time", "command", "diverge_version", "record_config.output"}
    | {"env.MASTER_PORT", "env.MASTER_ADDR"}  # torchrun --standalone picks a free port per run
)


def flatten(meta: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in meta.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[EnvDifference]:
    """Differences in versions, threads, determinism switches, env vars, arguments and seeds."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted((set(fa) | set(fb)) - IGNORED)
    pairs = ((k, _normal(fa.get(k), k), _normal(fb.get(k), k)) for k in keys)
    return [EnvDifference(k, a, b) for k, a, b in pairs if a != b]


def _normal(value: Any, key: str) -> Any:
    if key == "argv" and isinstance(value, list) and value:
        return [value[0].rsplit("/", 1)[-1], *value[1:]]  # the script's directory does not matter
    return value
