"""What differs between the environments of two runs (shown before any tensor difference).

>>> environment_differences({"env": {"OMP_NUM_THREADS": "1"}}, {"env": {"OMP_NUM_THREADS": "2"}})
[EnvDifference(key='env.OMP_NUM_THREADS', a='1', b='2')]
"""

from __future__ import annotations

import difflib
from typing import Any

from divergence.compare.model import EnvDifference
from divergence.report.notes import meta_notes
from divergence.store.environment import matters
from divergence.store.names import flatten

# Per-process facts that differ between any two runs and say nothing about bits. The diverge
# version is compared: another recorder may probe other tensors or name them differently.
IGNORED = frozenset(
    {"host", "pid", "cwd", "start_time", "command", "record_config.output"}
    | {"env.MASTER_PORT", "env.MASTER_ADDR"}  # torchrun --standalone picks a free port per run
)


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[EnvDifference]:
    """Differences in versions, threads, determinism switches, env vars, arguments, seeds and
    the recorders' notes (in words)."""
    fa, fb = flatten(meta_notes(a)), flatten(meta_notes(b))
    keys = sorted(k for k in (set(fa) | set(fb)) - IGNORED if _compared(k))
    if fa.get("diverge_version") != fb.get("diverge_version"):  # that difference itself is listed
        keys = [k for k in keys if not _newer_setting(k, fa, fb)]
    pairs = ((k, _normal(fa.get(k), k), _normal(fb.get(k), k)) for k in keys)
    differences = [EnvDifference(k, a, b) for k, a, b in pairs if a != b and _known(k, a, b)]
    return [
        _seed_calls(d) if d.key in CALL_LISTS else _seed_calls(d, "note") if d.key == "notes" else d
        for d in differences
    ]


def _compared(key: str) -> bool:
    """Runs recorded before the recorder dropped Terraform's ``TF_*`` variables still hold them.
    Generator states at the start differ whenever a generator is unseeded: rng_evidence.py reads
    them as evidence, they are no setting.

    >>> _compared("env.TF_CLI_CONFIG_FILE"), _compared("env.TF_ENABLE_ONEDNN_OPTS")
    (False, True)
    >>> _compared("rng_at_start.python.random"), _compared("rng_at_end.numpy.random")
    (False, False)
    """
    if key.startswith(("rng_at_start.", "rng_at_end.")):
        return False
    return not key.startswith("env.") or matters(key[4:])


# metadata lists of calls, shown call by call
CALL_LISTS = ("seeds", "rng_restores", "sampler_epochs", "thread_calls")


def _newer_setting(key: str, fa: dict[str, Any], fb: dict[str, Any]) -> bool:
    """A setting only one run has, between runs of different recorder versions, is one the
    older recorder did not record: no difference. An environment variable set in one run only
    stays one.

    >>> _newer_setting("dataloaders.0.batch_size", {}, {"dataloaders.0.batch_size": 64})
    True
    >>> _newer_setting("env.OMP_NUM_THREADS", {}, {"env.OMP_NUM_THREADS": "2"})
    False
    """
    return not key.startswith("env.") and (key not in fa or key not in fb)


def _known(key: str, a: Any, b: Any) -> bool:
    """Whether both runs recorded a value worth comparing: a script digest only when both
    have one: ``python -c`` and older recorders write none.

    >>> _known("script_digest", "", "1f2e3d4c5b6a7980"), _known("argv", None, ["x.py"])
    (False, True)
    """
    return key != "script_digest" or bool(a and b)


def _seed_calls(difference: EnvDifference, noun: str = "call") -> EnvDifference:
    """The seeding (or state-restoring) calls that only one run made, written as calls
    (matched as sequences: a call one run adds does not shift the others); with ``noun``
    "note", the recorder's notes one run has (each is long: a note both have is left out).

    >>> a = [{"call": "random.seed", "seed": "0", "step": 0}]
    >>> _seed_calls(EnvDifference("seeds", a, [{**a[0], "seed": "7"}]))
    EnvDifference(key='seeds', a='random.seed(0) at step 0', b='random.seed(7) at step 0')
    >>> _seed_calls(EnvDifference("seeds", [{"call": "tf.random.set_seed", "seed": "1"}], []))
    EnvDifference(key='seeds', a='tf.random.set_seed(1)', b='no call')
    >>> _seed_calls(EnvDifference("seeds", 3, [])).a  # not a list of calls: shown as it is
    3
    >>> restore = {"call": "torch.set_rng_state", "state": "6f87d17475ee6122", "step": 0}
    >>> _seed_calls(EnvDifference("rng_restores", [restore], None)).a
    'torch.set_rng_state(a state 6f87d17475ee6122) at step 0'
    >>> seed = {"call": "torch.manual_seed", "seed": "0"}
    >>> _seed_calls(EnvDifference("seeds", [seed], [{"call": "random.seed", "seed": "1"}, seed]))
    EnvDifference(key='seeds', a='no other call', b='random.seed(1)')
    >>> notes = EnvDifference("notes", ["XLA: ...", "grappler: ..."], ["grappler: ..."])
    >>> _seed_calls(notes, "note")
    EnvDifference(key='notes', a='XLA: ...', b='no other note')
    """
    a, b = difference.a or [], difference.b or []
    if not isinstance(a, list) or not isinstance(b, list):
        return difference
    calls_a, calls_b = [_seed_call(c) for c in a], [_seed_call(c) for c in b]
    if calls_a == calls_b:  # they differ in something a call does not show: keep it all
        return difference
    shown_a, shown_b = [], []
    matcher = difflib.SequenceMatcher(a=calls_a, b=calls_b, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag != "equal":
            shown_a += calls_a[a0:a1]
            shown_b += calls_b[b0:b1]
    only_a, only_b = (
        _only(shown, calls, noun) for shown, calls in ((shown_a, calls_a), (shown_b, calls_b))
    )
    return EnvDifference(difference.key, only_a, only_b)


def _only(shown: list[str], calls: list[str], noun: str) -> str:
    """A run's calls the other did not make; "no other call" where it made only calls the
    other made too ("no call" would read as never seeded)."""
    if not calls:
        return f"no {noun}"
    return _some(shown) if shown else f"no other {noun}"


def _seed_call(call: Any) -> str:
    if not isinstance(call, dict):
        return str(call)
    step = f" at step {call['step']}" if call.get("step") is not None else ""
    if "seed" not in call:  # a restored state (rng_restores)
        return f"{call.get('call')}(a state {call.get('state') or 'not read'}){step}"
    if call.get("entropy") and call.get("state"):  # a seed the OS gave: the state it left
        return f"{call.get('call')}() from OS entropy (state {call['state']}){step}"
    if call.get("entropy"):  # a seed the OS gave, without the state it left
        return f"{call.get('call')}() drew {call.get('seed')} from OS entropy{step}"
    return f"{call.get('call')}({call.get('seed')}){step}"


def _some(calls: list[str], limit: int = 2) -> str:
    """The first calls, and how many more.

    >>> _some(["random.seed(0)", "numpy.random.seed(0)", "torch.manual_seed(0)"])
    'random.seed(0); numpy.random.seed(0) (+1 more)'
    >>> _some([])
    'no call'
    """
    if not calls:
        return "no call"
    more = f" (+{len(calls) - limit} more)" if len(calls) > limit else ""
    return "; ".join(calls[:limit]) + more


def _normal(value: Any, key: str) -> Any:
    if key == "argv" and isinstance(value, list) and value:
        return [value[0].rsplit("/", 1)[-1], *value[1:]]  # the script's directory does not matter
    return value
