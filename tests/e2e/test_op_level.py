"""``--granularity op`` end to end: no false divergence, no perturbation, the right op found."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, Recorder, assert_repeats_and_keeps_its_bits, compare_json

OP = ("--granularity", "op")


def test_identical_op_level_runs_match(record: Recorder) -> None:
    """Same settings twice: every op (allocations included) compares equal."""
    a = record("mlp.py", "--steps", "2", options=OP, tag="a")
    b = record("mlp.py", "--steps", "2", options=OP, tag="b")
    code, report = compare_json(a, b)
    assert (code, report["status"]) == (0, "identical"), report["first_divergence"]


def test_op_level_recording_does_not_change_the_bits(record: Recorder, tmp_path: Path) -> None:
    recorded, plain = tmp_path / "recorded.pt", tmp_path / "plain.pt"
    record("mlp.py", "--steps", "2", "--out", str(recorded), options=OP)
    subprocess.run(
        [sys.executable, str(SCRIPTS / "mlp.py"), "--steps", "2", "--out", str(plain)],
        check=True,
        capture_output=True,
    )
    import torch

    state_a, state_b = torch.load(recorded), torch.load(plain)
    for key in state_a:
        assert torch.equal(state_a[key].view(torch.int32), state_b[key].view(torch.int32)), key


def test_thread_count_divergence_is_found_at_an_op(record: Recorder) -> None:
    """1 vs 2 threads, a loss of 32 means of 64,000 elements (see wide_loss.py): one aten op
    gives other bits from matching inputs; a loss's on every CPU, or a GEMM's first where the
    CPU's BLAS splits it too, so the op is not pinned."""
    options = (*OP, "--steps", "0:1")
    a = record("wide_loss.py", "--steps", "1", "--threads", "1", options=options)
    b = record("wide_loss.py", "--steps", "1", "--threads", "2", options=options)
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["kind"]) == (0, "op_output")
    assert "/aten." in first["location"] and first["phase"] in ("forward", "backward")
    assert first["origin"] is True and "its inputs matched" in first["origin_text"]
    assert first["cause"] == "environment" and "thread count" in first["cause_text"]


def test_planted_change_in_a_modules_own_code_is_found_at_its_op(record: Recorder) -> None:
    """--flip-bit 0 vs 1: the same ops run; the xor inside ``block``'s own forward (not in
    ``block.fc``) produces different bits from matching inputs."""
    a = record("mlp.py", "--steps", "2", "--flip-step", "1", "--flip-bit", "0", options=OP)
    b = record("mlp.py", "--steps", "2", "--flip-step", "1", "--flip-bit", "1", options=OP)
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1 and (first["step"], first["phase"]) == (1, "forward")
    module, _, op = first["location"].rpartition("/")
    assert module == "block" and op.startswith("aten.bitwise_xor")
    assert first["kind"] == "op_output" and first["origin"] is True


def test_uninitialised_memory_is_recorded_as_skipped(tmp_path: Path) -> None:
    import torch

    import divergence
    from divergence.store.run import Run
    from divergence.store.schema import Kind

    with divergence.Recorder(tmp_path / "run", granularity="op"):
        lin = torch.nn.Linear(4, 4)
        for _ in range(2):
            buf = torch.empty(3, 4)
            buf.fill_(1.0)  # its input is garbage, its output is not
            lin(buf).sum()
            divergence.step()
    file = Run.open(tmp_path / "run").processes[0].load()
    rows = {
        (file.strings[r["name"]], int(r["kind"])): (int(r["status"]), file.strings[r["note"]])
        for r in file.records
        if r["step"] == 1
    }
    assert rows[("aten.empty.memory_format", Kind.OP_OUTPUT)][0] == 1
    assert "uninitialised" in rows[("aten.empty.memory_format", Kind.OP_OUTPUT)][1]
    assert rows[("aten.fill_.Scalar", Kind.OP_INPUT)][0] == 1
    assert rows[("aten.fill_.Scalar", Kind.OP_OUTPUT)][0] == 0


def test_view_ops_are_left_to_the_op_that_reads_them(tmp_path: Path) -> None:
    """A view (``t``, ``view``, ``detach``) computes nothing, so it gets no record of its own;
    the op that reads it records the view as its input, fingerprinted as that view."""
    import torch

    import divergence
    from divergence.frameworks.torch.fingerprint import fingerprint_tensor
    from divergence.store.run import Run
    from divergence.store.schema import Kind

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(8)
    with divergence.Recorder(tmp_path / "run", granularity="op"):
        for _ in range(2):
            lin(x.view(2, 4)).sum().backward()  # view, t, addmm; backward: t, mm, detach
            divergence.step()
    file = Run.open(tmp_path / "run").processes[0].load()
    rows = [r for r in file.records if r["step"] == 1]
    ops = {
        file.strings[r["name"]].rpartition("/")[2]
        for r in rows
        if r["kind"] in (Kind.OP_INPUT, Kind.OP_OUTPUT)
    }
    assert {"aten.addmm.default", "aten.mm.default", "aten.sum.default"} <= ops
    assert not [op for op in ops if op.split(".")[1] in ("t", "view", "detach")], ops
    addmm_input_2 = next(
        int(r["fp"])
        for r in rows
        if file.strings[r["name"]].endswith("/aten.addmm.default")
        and r["kind"] == Kind.OP_INPUT
        and r["slot"] == 2
    )
    assert addmm_input_2 == fingerprint_tensor(lin.weight.detach().t()).value


def test_a_view_op_that_copies_is_recorded(tmp_path: Path) -> None:
    """``to``, ``contiguous`` and ``reshape`` are views by schema but copy when they must;
    under ``inference_mode`` they reach the dispatch mode whole, and their copies are ops."""
    import torch

    import divergence
    from divergence.frameworks.torch.fingerprint import fingerprint_tensor
    from divergence.store.run import Run
    from divergence.store.schema import Kind

    x = torch.randn(4, 3)
    with divergence.Recorder(tmp_path / "run", granularity="op"), torch.inference_mode():
        for _ in range(2):
            x.to(torch.float16).sum()
            x.t().contiguous().sum()
            x.view(12).sum()  # a true view: no record of its own
            divergence.step()
    file = Run.open(tmp_path / "run").processes[0].load()
    outputs = {
        file.strings[r["name"]]: int(r["fp"])
        for r in file.records
        if r["step"] == 1 and r["kind"] == Kind.OP_OUTPUT
    }
    assert outputs["aten.to.dtype"] == fingerprint_tensor(x.to(torch.float16)).value
    assert outputs["aten.contiguous.default"] == fingerprint_tensor(x.t().contiguous()).value
    assert not [name for name in outputs if name.startswith(("aten.view", "aten.t."))]


def test_an_alias_written_through_its_base_is_hashed_again(tmp_path: Path) -> None:
    """``detach`` passes its input's fingerprint on without a hash; once the base is written in
    place, the op that reads the alias must see the new value, not the passed-on one."""
    import torch

    import divergence
    from divergence.frameworks.torch.fingerprint import fingerprint_tensor
    from divergence.store.run import Run
    from divergence.store.schema import Kind

    x = torch.randn(6)
    with divergence.Recorder(tmp_path / "run", granularity="op"):
        for _ in range(2):
            y = torch.relu(x)
            alias = y.detach()
            y.add_(1.0)  # the alias's value changes with it
            alias.mul(2.0)
            divergence.step()
    file = Run.open(tmp_path / "run").processes[0].load()
    mul_input = next(
        int(r["fp"])
        for r in file.records
        if r["step"] == 1
        and file.strings[r["name"]] == "aten.mul.Tensor"
        and r["kind"] == Kind.OP_INPUT
    )
    assert mul_input == fingerprint_tensor(torch.relu(x) + 1.0).value


def test_backward_ops_belong_to_the_module_whose_forward_made_them(tmp_path: Path) -> None:
    """Nested modules, a module's own code between its children, and parameter gradients."""
    import torch
    from torch import nn

    import divergence
    from divergence.store.run import Run
    from divergence.store.schema import Kind, Phase

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return self.norm(h * torch.sigmoid(h))  # Block's own ops, between its children

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Block(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with divergence.Recorder(tmp_path / "run", granularity="op"):
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(3, 4)).pow(2).mean().backward()
            optimizer.step()
    file = Run.open(tmp_path / "run").processes[0].load()
    backward = {
        file.strings[r["name"]]
        for r in file.records
        if r["step"] == 1 and r["phase"] == Phase.BACKWARD and r["kind"] == Kind.OP_OUTPUT
    }
    assert {
        "1.norm/aten.native_layer_norm_backward.default",
        "1/aten.sigmoid_backward.default",
        "1.fc/aten.mm.default",
        "0/aten.mm.default",
        "2/aten.mm.default",
        "aten.pow.Tensor_Scalar",  # the loss, outside any module
    } <= backward
    modules = {name.rpartition("/")[0] for name in backward}
    assert modules == {"", "0", "1", "1.fc", "1.norm", "2"}


@pytest.mark.parametrize("dump", [False, True])
def test_dropout_with_another_seed_is_the_origin_at_bernoulli(tmp_path: Path, dump: bool) -> None:
    """Dropout fills an uninitialised buffer with ``bernoulli_``: that buffer is what the op
    writes, not an input that could carry a difference, so the op is the origin, and the
    generator state is the evidence. With dumps (as a hunt's zoom records) the skipped input
    still says why, and the call's arguments move to the op's output record."""
    import torch

    import divergence
    from divergence.compare import compare_runs
    from divergence.store.schema import Kind

    def run(seed: int, out: Path) -> None:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.ones(2, 4)
        with divergence.Recorder(out, granularity="op", dump=dump):
            torch.manual_seed(seed)
            model(x).sum().backward()
            optimizer.step()

    run(1, tmp_path / "a")
    run(2, tmp_path / "b")
    first = compare_runs(tmp_path / "a", tmp_path / "b").first
    assert first is not None and first.location == "1/aten.bernoulli_.float"
    assert first.origin is True, first.origin_text
    assert "input 0 held uninitialised memory, which it writes" in first.origin_text
    assert first.rng_evidence == ("torch.cpu from step 0",)
    if dump:
        (row,) = notes_of(tmp_path / "a", "1/aten.bernoulli_.float", Kind.OP_OUTPUT)
        assert row.startswith('{"op": "aten.bernoulli_.float"')


def notes_of(run: Path, name: str, kind: int) -> list[str]:
    """The notes of the records of ``name`` and ``kind`` in a one-process run."""
    from divergence.store.run import Run

    file = Run.open(run).processes[0].load()
    records = file.records
    return [
        file.strings[r["note"]]
        for r in records
        if file.strings[r["name"]] == name and r["kind"] == kind
    ]


@pytest.mark.parametrize("granularity", ["module", "op"])
def test_a_transformer_training_keeps_its_bits_and_repeats(
    record: Recorder, tmp_path: Path, granularity: str
) -> None:
    """Dropout, AdamW, clipping, a schedule, bf16 autocast and accumulation: recording changes
    no bit of the trained weights, and two recorded runs compare identical."""

    options = ("--granularity", granularity)
    outs = [tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "plain.pt"]
    runs = [
        record("transformer.py", "--autocast", "--out", str(out), options=options)
        for out in outs[:2]
    ]
    subprocess.run(
        [sys.executable, str(SCRIPTS / "transformer.py"), "--autocast", "--out", str(outs[2])],
        check=True,
        capture_output=True,
    )
    assert_repeats_and_keeps_its_bits(runs, outs[0], outs[2])


def test_replay_rebuilds_a_buffer_the_op_writes(tmp_path: Path) -> None:
    """The dumped bernoulli_ call (its only input an uninitialised buffer) replays, each time
    from the same generator state."""
    import torch

    import divergence
    from divergence.frameworks.torch.replay import replay

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    with divergence.Recorder(tmp_path / "run", granularity="op", dump=True):
        model(torch.ones(2, 4)).sum().backward()
        divergence.step()
    before = torch.get_rng_state()
    result = replay(tmp_path / "run", 0, "1/aten.bernoulli_.float", times=3)
    # each execution starts from one generator state: a random op replays stable
    assert len(result.outputs) == 3 and result.stable, result.outputs
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generator is untouched


def test_a_destination_an_op_overwrites_whole_is_not_compared(record: Recorder) -> None:
    """``copy_`` into a fresh ``torch.empty`` buffer: what the buffer held before is another
    run's leftover memory, which the copy overwrites without reading. Recorded as skipped (as
    ``zero_``'s destination is), so two runs of the training match."""
    from divergence.store.notes import Note
    from divergence.store.run import Run
    from divergence.store.schema import Kind

    runs = [record("copied_grads.py", options=("--granularity", "op"), tag=t) for t in "ab"]
    code, report = compare_json(*runs)
    assert code == 0, report["first_divergence"]
    file = Run.open(runs[0]).processes[0].load()
    destinations = [
        (int(r["status"]), file.strings[r["note"]])
        for r in file.records
        if file.strings[r["name"]].endswith("aten.copy_.default")
        and r["kind"] == Kind.OP_INPUT
        and r["slot"] == 0
    ]
    # (a buffer the recorder saw made by ``empty`` is noted as uninitialised memory)
    assert destinations and all(
        d[0] == 1 and d[1] in (Note.WRITTEN_BUFFER, Note.OVERWRITTEN) for d in destinations
    )
    filled = record("copied_grads.py", "--fill", options=("--granularity", "op"))
    file = Run.open(filled).processes[0].load()
    zeroed = [
        file.strings[r["note"]]
        for r in file.records
        if file.strings[r["name"]].endswith("aten.zero_.default") and r["kind"] == Kind.OP_INPUT
    ]
    assert zeroed and set(zeroed) == {Note.OVERWRITTEN}


def test_a_tensor_an_overwriting_op_also_reads_is_compared(tmp_path: Path) -> None:
    """``m.bernoulli_(m)``: the op overwrites ``self`` but reads ``p``, the same tensor: only
    the written argument is passed over."""
    import torch

    import divergence
    from divergence.store.notes import Note
    from divergence.store.run import Run
    from divergence.store.schema import Kind

    with divergence.Recorder(tmp_path / "run", granularity="op"):
        for _ in range(2):
            m = torch.full((4,), 0.5).add_(0.25)
            m.bernoulli_(m)
            divergence.step()
    file = Run.open(tmp_path / "run").processes[0].load()
    inputs = [
        (int(r["slot"]), int(r["status"]), file.strings[r["note"]])
        for r in file.records
        if r["kind"] == Kind.OP_INPUT and "bernoulli_" in file.strings[r["name"]]
    ]
    assert inputs[:2] == [(0, 1, Note.OVERWRITTEN), (1, 0, inputs[1][2])]


def test_two_optimizers_stepping_in_turn_share_a_step_as_at_module_level(
    tmp_path: Path,
) -> None:
    """Adam for one layer, SGD for the other, stepped one after the other: at op level too the
    second one's update continues the step the first one closed (torch's ``record_function``
    mark that ``Optimizer.step`` emits before its pre-hooks opened a step of its own, and so did
    the second optimizer's first op): each iteration is one step, as ``hunt`` needs to zoom
    into the module level's step."""
    import torch
    from torch import nn

    import divergence
    from divergence.store.run import Run
    from divergence.store.schema import Phase

    def train(granularity: str) -> Path:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        adam = torch.optim.Adam(model[0].parameters(), lr=0.01)
        sgd = torch.optim.SGD(model[2].parameters(), lr=0.01)
        with divergence.Recorder(tmp_path / granularity, granularity=granularity):
            for _ in range(3):
                adam.zero_grad()
                sgd.zero_grad()
                nn.functional.mse_loss(model(torch.randn(4, 4)), torch.randn(4, 2)).backward()
                adam.step()
                sgd.step()
        return tmp_path / granularity

    module, op = (Run.open(train(g)).processes[0].load() for g in ("module", "op"))
    assert module.steps_complete == op.steps_complete == 3
    for step in range(3):
        rows = op.records[(op.records["step"] == step) & (op.records["phase"] == Phase.OPTIMIZER)]
        owners = {op.strings[r["name"]].partition("/")[0] for r in rows}
        assert {"Adam", "SGD"} <= owners, (step, owners)
