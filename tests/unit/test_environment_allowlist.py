"""A run file holds only the environment variables that can change the bits: an allowlist."""

from __future__ import annotations

from fnmatch import fnmatchcase

from divergence.compare.environment import environment_differences
from divergence.compare.knowledge import causes, hints
from divergence.record.environment import interesting_environment
from divergence.store.environment import KEPT, redacted

# seen stored and shown by the blocklist this allowlist replaced
LEAKED = {
    "TF_ENCRYPTION_KEY": "k",
    "TORCH_PASS": "p",
    "NCCL_KEY": "k",
    "HOROVOD_SSH_KEY_PATH": "/root/.ssh/id",
    "MASTER_ADDR": "user:pw@host",
    "AWS_SECRET_ACCESS_KEY": "s",
    "HOME": "/root",
}


def test_nothing_outside_the_allowlist_is_stored() -> None:
    assert interesting_environment(LEAKED) == {}
    kept = interesting_environment({**LEAKED, "OMP_NUM_THREADS": "4", "NCCL_ALGO": "Ring"})
    assert kept == {"NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "4"}


def test_credentials_in_a_kept_value_are_redacted() -> None:
    flags = "--xla_dump_to=gs://me:secret@bucket/dumps --xla_cpu_fast_math=false"
    assert interesting_environment({"XLA_FLAGS": flags}) == {
        "XLA_FLAGS": "--xla_dump_to=gs://***@bucket/dumps --xla_cpu_fast_math=false"
    }
    assert redacted("https://token@host/x") == "https://***@host/x"
    assert redacted("a@b.c") == "***@b.c"  # an address: a user name is told as little


def test_every_variable_the_knowledge_base_names_is_kept() -> None:
    globs = {g[4:] for entry in (*causes(), *hints()) for g in entry.env if g.startswith("env.")}
    assert globs, "the knowledge base names environment variables"
    for glob in globs:
        assert any(fnmatchcase(name, glob) for name in KEPT), glob
    exact = {g for g in globs if not any(c in g for c in "*?[")}
    assert exact <= KEPT, exact - KEPT


def test_a_variable_an_older_run_stored_outside_the_allowlist_is_not_compared() -> None:
    a = {"env": {"TF_GPU_ALLOCATOR": "cuda_malloc_async", "OMP_NUM_THREADS": "4"}}
    b = {"env": {"TF_GPU_ALLOCATOR": "bfc", "OMP_NUM_THREADS": "2"}}
    assert [d.key for d in environment_differences(a, b)] == ["env.OMP_NUM_THREADS"]
