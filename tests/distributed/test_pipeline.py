"""Point-to-point messages end to end: a two-stage pipeline over real torchrun ranks (gloo),
recorded through the CLI. Each message is recorded once (``send#k`` on the sender, ``recv#k``
on the receiver, when the program waits for it), so a difference one rank sends is placed on
that rank and followed on the other, and a receive that took another sender's message is named
as such. Also torch's own ``torch.distributed.pipelining`` schedules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import Recorded, compare_json
from tests.distributed.specs import torchrun
from tests.harness.recordings import Recordings

TWO = torchrun("pipeline_p2p.py")
BATCHED = torchrun("pipeline_p2p.py", "--batched")
LATE = torchrun("pipeline_p2p.py", "--late-wait")
COMPILED = torchrun("pipeline_p2p.py", "--compiled")
GPIPE = torchrun("pipeline_schedule.py")
ONE_F_ONE_B = torchrun("pipeline_schedule.py", "1f1b")
# rank 1 takes the first of two messages from any rank: rank 0's in run A, rank 2's in B (the
# last sender waits for a file rank 1 creates: see the script)
SIDE = torchrun("pipeline_p2p.py", "--side-sender", nproc=3, env={"P2P_SYNC_FILE": "{dir}/turn"})
# ... by src=, rank 0 first in run A and rank 2 first in run B
ORDER = torchrun("pipeline_p2p.py", "--side-sender", nproc=3)
RUNS = {  # name -> recording (those named *plain run unrecorded)
    "a": TWO,
    "b": replace(TWO, copy="b"),
    "plain": replace(TWO, plain=True),
    "flip": torchrun("pipeline_p2p.py", "--flip-step", "2"),
    "batched": BATCHED,
    "batched_plain": replace(BATCHED, plain=True),
    "any": torchrun("pipeline_p2p.py", "--any-source"),
    "side_a": SIDE.with_env(P2P_LAST_SENDER="2"),
    "side_b": SIDE.with_env(P2P_LAST_SENDER="0"),
    "order_a": ORDER.with_env(P2P_FIRST_SENDER="0"),
    "order_b": ORDER.with_env(P2P_FIRST_SENDER="2"),
    # a receive waited for after the optimizer step and a message the peer needs first
    "late": LATE,
    "late_plain": replace(LATE, plain=True),
    # the messages sent and received inside torch.compile'd functions
    "compiled": COMPILED,
    "compiled_b": replace(COMPILED, copy="b"),
    "compiled_plain": replace(COMPILED, plain=True),
    "gpipe_a": GPIPE,
    "gpipe_b": replace(GPIPE, copy="b"),
    "gpipe_plain": replace(GPIPE, plain=True),
    "1f1b": ONE_F_ONE_B,
    "1f1b_plain": replace(ONE_F_ONE_B, plain=True),
}


@pytest.fixture(scope="module")
def runs(recordings: Recordings) -> dict[str, Recorded]:
    """Every recording of :data:`RUNS`, made once per session (cached on disk)."""
    return dict(zip(RUNS, recordings.make_all(RUNS.values()), strict=True))


def _printed(runs: dict[str, Recorded], name: str, what: str = "final-params") -> list[str]:
    """The lines the ranks printed that start with ``what``, sorted."""
    return sorted(line for line in runs[name].stdout.splitlines() if line.startswith(what))


def _diverged(a: Path, b: Path, place: tuple[object, ...]) -> dict[str, Any]:
    """The JSON report of two runs that diverge first at ``place`` (rank, step, kind, name)."""
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1
    assert (first["rank"], first["step"], first["kind"], first["location"]) == place
    return report


def _files(run: Path) -> list[RunFile]:
    return [RunFile.open(path) for path in sorted(run.glob("*.h5"))]


def _messages(run: Path, rank: int) -> list[tuple[int, str, str, str]]:
    """(step, kind, name, note) of a rank's point-to-point records, in order."""
    file = RunFile.open(run / f"rank{rank}.h5")
    rows = file.records[np.isin(file.records["kind"], [Kind.COLLECTIVE_IN, Kind.COLLECTIVE_OUT])]
    return [
        (int(r["step"]), Kind(r["kind"]).label, file.strings[r["name"]], file.strings[r["note"]])
        for r in rows
    ]


def test_each_message_is_recorded_once_on_each_side(runs: dict[str, Recorded]) -> None:
    """``send``/``recv`` call ``isend``/``irecv``: one record a message, not two."""
    for name in ("a", "batched"):
        step0 = [m for m in _messages(runs[name].run, 0) if m[0] == 0]
        assert step0 == [
            (0, "collective_in", "send#0", "to_rank=1"),
            (0, "collective_out", "recv#0", "from_rank=1"),
        ]
        step0 = [m for m in _messages(runs[name].run, 1) if m[0] == 0]
        assert step0 == [
            (0, "collective_out", "recv#0", "from_rank=0"),
            (0, "collective_in", "send#0", "to_rank=0"),
        ]
    # a receive from any rank is noted with the rank its message came from
    noted = "from_rank=0; any_source"
    assert _messages(runs["any"].run, 1)[0] == (0, "collective_out", "recv#0", noted)


@pytest.mark.parametrize("name", ["a", "batched", "late", "compiled", "gpipe_a", "1f1b"])
def test_recording_messages_changes_no_bits(runs: dict[str, Recorded], name: str) -> None:
    """Also a receive the program waits for only after its optimizer step, once its peer got
    a token sent after that step: the recorder never waits for a receive itself (0.19.0's
    first version did, before the step: both ranks hung). And torch's pipeline schedules."""
    plain = {"a": "plain", "gpipe_a": "gpipe_plain"}.get(name, f"{name}_plain")
    assert _printed(runs, name) == _printed(runs, plain)
    assert len(_printed(runs, name)) == 2


def test_messages_sent_from_compiled_code_compile_nothing_of_the_recorder(
    runs: dict[str, Recorded],
) -> None:
    """The recorder's wrappers run under dynamo's frame callback there: unmarked, dynamo
    compiled them into graphs of the program's, and recompiled them every step. The region's
    input, a buffer of zeros, is fingerprinted before the message fills it without a version
    bump: the region's output (the same tensor) is the message's value, not the zeros."""
    assert _printed(runs, "compiled", "graphs") == _printed(runs, "compiled_plain", "graphs")
    assert len(_printed(runs, "compiled", "graphs")) == 2
    code, report = compare_json(runs["compiled"].run, runs["compiled_b"].run)
    assert code == 0, report["first_divergence"]
    file = RunFile.open(runs["compiled"].run / "rank1.h5")
    step0 = file.records[file.records["step"] == 0]
    printed = {(Kind(r["kind"]).label, file.strings[r["name"]]): int(r["fp"]) for r in step0}
    region = "<compiled second_stage.<locals>.receive>"
    assert printed[("output", region)] == printed[("collective_out", "recv#0")]


def test_a_pipeline_schedule_compares_identical(runs: dict[str, Recorded]) -> None:
    """A stage learns its shapes by running once on uninitialised tensors: that run is not
    recorded (it made two identical runs differ at step 0)."""
    code, report = compare_json(runs["gpipe_a"].run, runs["gpipe_b"].run)
    assert code == 0, report["first_divergence"]
    names = {file.strings[i] for file in _files(runs["gpipe_a"].run) for i in file.records["name"]}
    assert {"send#0", "recv#0"} <= names


def test_blocking_batched_and_any_source_messages_compare_identical(
    runs: dict[str, Recorded],
) -> None:
    """The same messages through send/recv, batch_isend_irecv's works (recorded when waited)
    or a receive from any rank: the same records, the same bits."""
    for other in ("b", "batched", "any"):
        code, report = compare_json(runs["a"].run, runs[other].run)
        assert code == 0, (other, report["first_divergence"])


def test_a_difference_sent_is_placed_on_the_sender_and_followed_by_the_receiver(
    runs: dict[str, Recorded],
) -> None:
    """Before 0.19.0 the receiving rank's first difference was its stage's input, which read
    as a rank that diverged first on its own."""
    report = _diverged(runs["a"].run, runs["flip"].run, ("rank0", 2, "collective_in", "send#0"))
    first = report["first_divergence"]
    assert first["origin"] is True
    assert "the tensor it sent through `send#0` differs" in first["origin_text"]
    roles = {p["process"]: (p["role"], p["role_text"]) for p in report["processes"]}
    assert roles["rank0"][0] == "diverged first"
    assert roles["rank1"] == (
        "followed",
        "step 2, communication: collective out of recv#0 (received from rank0)",
    )


def test_a_receive_from_any_rank_that_took_another_message_is_named(
    runs: dict[str, Recorded],
) -> None:
    """Rank 1 took rank 0's message first in run A and rank 2's in run B: no rank computed
    anything else, the receive got another sender's message. Rank 0 then received other
    gradients from rank 1: it followed rank 1."""
    report = _diverged(
        runs["side_a"].run, runs["side_b"].run, ("rank1", 0, "collective_out", "recv#0")
    )
    first = report["first_divergence"]
    assert first["origin"] is True
    assert "the message came from rank0 in run A and from rank2 in run B" in first["origin_text"]
    assert first["cause"] == "communication"
    assert "a receive from any rank" in first["cause_text"]
    assert "took another sender's message" in first["cause_text"]
    roles = {p["process"]: p["role"] for p in report["processes"]}
    assert roles == {"rank0": "followed", "rank1": "communication", "rank2": "identical"}


def test_receives_by_src_in_another_order_are_named(runs: dict[str, Recorded]) -> None:
    """Rank 1 names each sender (``src=``), in an order decided by an unrecorded variable:
    not a receive from any rank; the program received in another order."""
    report = _diverged(
        runs["order_a"].run, runs["order_b"].run, ("rank1", 0, "collective_out", "recv#0")
    )
    first = report["first_divergence"]
    assert "(each named by src=)" in first["origin_text"]
    assert first["cause"] == "communication"
    assert "received its messages in another order" in first["cause_text"]
    assert "from rank 0 in run A, from rank 2 in run B" in first["cause_text"]
