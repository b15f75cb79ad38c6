"""Point-to-point messages end to end: a two-stage pipeline over real torchrun ranks (gloo),
recorded through the CLI. Each message is recorded once (``send#k`` on the sender, ``recv#k``
on the receiver), so a difference one rank sends is placed on that rank and followed on the
other, and a receive that took another sender's message is named as such."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from divergence.store.reader import RunFile
from divergence.store.schema import Kind
from tests.conftest import SCRIPTS, compare_json
from tests.distributed.jobs import launch, run_all

TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--standalone"]
PIPELINE = str(SCRIPTS / "pipeline_p2p.py")
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


def _final_params(runs: dict[str, Path], name: str) -> list[str]:
    text = (runs[name].parent / f"{name}.stdout").read_text()
    return sorted(line for line in text.splitlines() if line.startswith("final-params"))


def _place(first: dict[str, Any]) -> tuple[object, ...]:
    return (first["rank"], first["step"], first["kind"], first["location"])


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
    assert _messages(runs["any"], 1)[0] == (0, "collective_out", "recv#0", "from rank 0")


@pytest.mark.parametrize("name", ["a", "batched"])
def test_recording_messages_changes_no_bits(runs: dict[str, Path], name: str) -> None:
    assert _final_params(runs, name) == _final_params(
        runs, "plain" if name == "a" else f"{name}_plain"
    )
    assert len(_final_params(runs, name)) == 2


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
    code, report = compare_json(runs["a"], runs["flip"])
    assert code == 1
    first = report["first_divergence"]
    assert _place(first) == ("rank0", 2, "collective_in", "send#0")
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
    code, report = compare_json(runs["side_a"], runs["side_b"])
    assert code == 1
    first = report["first_divergence"]
    assert _place(first) == ("rank1", 0, "collective_out", "recv#0")
    assert first["origin"] is True
    assert "the message came from rank0 in run A and from rank2 in run B" in first["origin_text"]
    assert first["cause"] == "communication"
    assert "a receive without src=" in first["cause_text"]
    assert "from rank 0 in run A, from rank 2 in run B" in first["cause_text"]
    roles = {p["process"]: p["role"] for p in report["processes"]}
    assert roles == {"rank0": "followed", "rank1": "communication", "rank2": "identical"}
