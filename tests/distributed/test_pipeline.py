"""Point-to-point messages end to end: a two-stage pipeline over real torchrun ranks (gloo),
recorded through the CLI. Each message is recorded once (``send#k`` on the sender, ``recv#k``
on the receiver, when the program waits for it), so a difference one rank sends is placed on
that rank and followed on the other, and a receive that took another sender's message is named
as such. Also torch's own ``torch.distributed.pipelining`` schedules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import ANY_SOURCE, Kind
from tests.conftest import SCRIPTS, compare_json
from tests.distributed.jobs import launch, run_all

TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--standalone"]
PIPELINE = str(SCRIPTS / "pipeline_p2p.py")
SCHEDULE = [*TORCHRUN, "--nproc_per_node", "2", str(SCRIPTS / "pipeline_schedule.py")]
TWO = [*TORCHRUN, "--nproc_per_node", "2", PIPELINE]
THREE = [*TORCHRUN, "--nproc_per_node", "3", PIPELINE]
RUNS: dict[str, tuple[list[str], dict[str, str]]] = {  # name -> (command, environment)
    "a": (TWO, {}),
    "b": (TWO, {}),
    "plain": (TWO, {}),  # not recorded
    "flip": ([*TWO, "--flip-step", "2"], {}),
    "batched": ([*TWO, "--batched"], {}),
    "batched_plain": ([*TWO, "--batched"], {}),
    "any": ([*TWO, "--any-source"], {}),
    # rank 1 takes the first of two messages from any rank: rank 0's in run A, rank 2's in B
    "side_a": ([*THREE, "--side-sender"], {"P2P_LAST_SENDER": "2"}),
    "side_b": ([*THREE, "--side-sender"], {"P2P_LAST_SENDER": "0"}),
    # ... by src=, rank 0 first in run A and rank 2 first in run B
    "order_a": ([*THREE, "--side-sender"], {"P2P_FIRST_SENDER": "0"}),
    "order_b": ([*THREE, "--side-sender"], {"P2P_FIRST_SENDER": "2"}),
    # a receive waited for after the optimizer step and a message the peer needs first
    "late": ([*TWO, "--late-wait"], {}),
    "late_plain": ([*TWO, "--late-wait"], {}),
    # the messages sent and received inside torch.compile'd functions
    "compiled": ([*TWO, "--compiled"], {}),
    "compiled_b": ([*TWO, "--compiled"], {}),
    "compiled_plain": ([*TWO, "--compiled"], {}),
    "gpipe_a": (SCHEDULE, {}),
    "gpipe_b": (SCHEDULE, {}),
    "gpipe_plain": (SCHEDULE, {}),
    "1f1b": ([*SCHEDULE, "1f1b"], {}),
    "1f1b_plain": ([*SCHEDULE, "1f1b"], {}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Record every run of :data:`RUNS` (those named ``*plain`` run unrecorded)."""
    base = tmp_path_factory.mktemp("pipeline")
    paths = {name: base / name for name in RUNS}

    def start(name: str) -> subprocess.Popen[str]:
        command, env = RUNS[name]
        out = None if name.endswith("plain") else paths[name]
        turn = {"P2P_SYNC_FILE": str(base / f"{name}.turn")}  # (see the script)
        return launch(command, out, {**os.environ, **env, **turn})

    for name, job in run_all(list(RUNS), start).items():
        assert job.returncode == 0, (name, job.stderr[-3000:])
        (base / f"{name}.stdout").write_text(job.stdout)
    return paths


def _printed(runs: dict[str, Path], name: str, what: str = "final-params") -> list[str]:
    """The lines the ranks printed that start with ``what``, sorted."""
    text = (runs[name].parent / f"{name}.stdout").read_text()
    return sorted(line for line in text.splitlines() if line.startswith(what))


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


def test_each_message_is_recorded_once_on_each_side(runs: dict[str, Path]) -> None:
    """``send``/``recv`` call ``isend``/``irecv``: one record a message, not two."""
    for name in ("a", "batched"):
        step0 = [m for m in _messages(runs[name], 0) if m[0] == 0]
        assert step0 == [
            (0, "collective_in", "send#0", "to rank 1"),
            (0, "collective_out", "recv#0", "from rank 1"),
        ]
        step0 = [m for m in _messages(runs[name], 1) if m[0] == 0]
        assert step0 == [
            (0, "collective_out", "recv#0", "from rank 0"),
            (0, "collective_in", "send#0", "to rank 0"),
        ]
    # a receive from any rank is noted with the rank its message came from
    noted = f"from rank 0 ({ANY_SOURCE})"
    assert _messages(runs["any"], 1)[0] == (0, "collective_out", "recv#0", noted)


@pytest.mark.parametrize("name", ["a", "batched", "late", "compiled", "gpipe_a", "1f1b"])
def test_recording_messages_changes_no_bits(runs: dict[str, Path], name: str) -> None:
    """Also a receive the program waits for only after its optimizer step, once its peer got
    a token sent after that step: the recorder never waits for a receive itself (0.19.0's
    first version did, before the step: both ranks hung). And torch's pipeline schedules."""
    plain = {"a": "plain", "gpipe_a": "gpipe_plain"}.get(name, f"{name}_plain")
    assert _printed(runs, name) == _printed(runs, plain)
    assert len(_printed(runs, name)) == 2


def test_messages_sent_from_compiled_code_compile_nothing_of_the_recorder(
    runs: dict[str, Path],
) -> None:
    """The recorder's wrappers run under dynamo's frame callback there: unmarked, dynamo
    compiled them into graphs of the program's, and recompiled them every step. The region's
    input, a buffer of zeros, is fingerprinted before the message fills it without a version
    bump: the region's output (the same tensor) is the message's value, not the zeros."""
    assert _printed(runs, "compiled", "graphs") == _printed(runs, "compiled_plain", "graphs")
    assert len(_printed(runs, "compiled", "graphs")) == 2
    code, report = compare_json(runs["compiled"], runs["compiled_b"])
    assert code == 0, report["first_divergence"]
    file = RunFile.open(runs["compiled"] / "rank1.h5")
    step0 = file.records[file.records["step"] == 0]
    printed = {(Kind(r["kind"]).label, file.strings[r["name"]]): int(r["fp"]) for r in step0}
    region = "<compiled second_stage.<locals>.receive>"
    assert printed[("output", region)] == printed[("collective_out", "recv#0")]


def test_a_pipeline_schedule_compares_identical(runs: dict[str, Path]) -> None:
    """A stage learns its shapes by running once on uninitialised tensors: that run is not
    recorded (it made two identical runs differ at step 0)."""
    code, report = compare_json(runs["gpipe_a"], runs["gpipe_b"])
    assert code == 0, report["first_divergence"]
    names = {file.strings[i] for file in _files(runs["gpipe_a"]) for i in file.records["name"]}
    assert {"send#0", "recv#0"} <= names


def test_blocking_batched_and_any_source_messages_compare_identical(
    runs: dict[str, Path],
) -> None:
    """The same messages through send/recv, batch_isend_irecv's works (recorded when waited)
    or a receive from any rank: the same records, the same bits."""
    for other in ("b", "batched", "any"):
        code, report = compare_json(runs["a"], runs[other])
        assert code == 0, (other, report["first_divergence"])


def test_a_difference_sent_is_placed_on_the_sender_and_followed_by_the_receiver(
    runs: dict[str, Path],
) -> None:
    """Before 0.19.0 the receiving rank's first difference was its stage's input, which read
    as a rank that diverged first on its own."""
    report = _diverged(runs["a"], runs["flip"], ("rank0", 2, "collective_in", "send#0"))
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
    runs: dict[str, Path],
) -> None:
    """Rank 1 took rank 0's message first in run A and rank 2's in run B: no rank computed
    anything else, the receive got another sender's message. Rank 0 then received other
    gradients from rank 1: it followed rank 1."""
    report = _diverged(runs["side_a"], runs["side_b"], ("rank1", 0, "collective_out", "recv#0"))
    first = report["first_divergence"]
    assert first["origin"] is True
    assert "the message came from rank0 in run A and from rank2 in run B" in first["origin_text"]
    assert first["cause"] == "communication"
    assert "a receive from any rank" in first["cause_text"]
    assert "took another sender's message" in first["cause_text"]
    roles = {p["process"]: p["role"] for p in report["processes"]}
    assert roles == {"rank0": "followed", "rank1": "communication", "rank2": "identical"}


def test_receives_by_src_in_another_order_are_named(runs: dict[str, Path]) -> None:
    """Rank 1 names each sender (``src=``), in an order decided by an unrecorded variable:
    not a receive from any rank; the program received in another order."""
    report = _diverged(runs["order_a"], runs["order_b"], ("rank1", 0, "collective_out", "recv#0"))
    first = report["first_divergence"]
    assert "(each named by src=)" in first["origin_text"]
    assert first["cause"] == "communication"
    assert "received its messages in another order" in first["cause_text"]
    assert "from rank 0 in run A, from rank 2 in run B" in first["cause_text"]
