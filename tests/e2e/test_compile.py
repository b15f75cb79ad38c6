"""torch.compile: a compiled region is recorded at its boundary, flagged, and never changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from divergence.store.run import Run
from divergence.store.schema import Kind, Phase
from tests.conftest import Recorder, Recordings, compare_json, recording

OP = ("--granularity", "op")
REGION = {"module": "Net", "method": "Net", "fn": "<compiled main.<locals>.loss_of>"}


def final_parameters(path: Path) -> dict[str, torch.Tensor]:
    return dict(torch.load(path))


def unrecorded(recordings: Recordings, *args: str) -> dict[str, torch.Tensor]:
    """The final parameters of ``compiled.py ARGS`` run unrecorded (made once per session)."""
    spec = recording("compiled.py", *args, "--out", "{dir}/plain.pt", plain=True)
    return final_parameters(recordings.make(spec).dir / "plain.pt")


def assert_same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key].view(torch.int32), b[key].view(torch.int32)), key


def records_of(run_dir: Path, phase: Phase | None = None) -> list[tuple[int, str, str]]:
    """(step, kind, name) of every record of the run's one file (of one phase if given)."""
    (process,) = Run.open(run_dir).processes
    file = process.load()
    rows = file.records if phase is None else file.records[file.records["phase"] == phase]
    names = [file.strings[i] for i in rows["name"]]
    kinds = [Kind(k).label for k in rows["kind"]]
    return list(zip(rows["step"].tolist(), kinds, names, strict=True))


@pytest.mark.parametrize("how", ["module", "method", "fn"])
@pytest.mark.parametrize("granularity", ["module", "op"])
def test_compiled_region_is_recorded_at_its_boundary_without_changing_the_bits(
    record: Recorder, recordings: Recordings, how: str, granularity: str
) -> None:
    options = ("--granularity", granularity)
    run = record("compiled.py", "--how", how, "--out", "{dir}/recorded.pt", options=options)
    recorded = final_parameters(run.parent / "recorded.pt")
    assert_same_bits(recorded, unrecorded(recordings, "--how", how))
    records = records_of(run)
    region = REGION[how]
    assert [step for step, kind, name in records if kind == "compiled"] == [0, 1, 2]
    assert {name for _, kind, name in records if kind == "compiled"} == {region}
    # the region's call is recorded like a module call: its output and the gradient into it
    assert {kind for _, kind, name in records if name == region} >= {"compiled", "output"}
    assert any(kind == "grad_output" and name == region for _, kind, name in records)
    forward = records_of(run, Phase.FORWARD)
    inside = {name for _, _, name in forward if name.startswith(("fc1", "fc2", "Net/"))}
    if how == "fn":  # the model itself runs eagerly: its modules are observed
        assert {"fc1", "fc2"} <= inside
    else:  # its modules and (at op level) its ops run compiled: not observed
        assert not inside


def test_inductor_region_at_op_level_keeps_the_bits(
    record: Recorder, recordings: Recordings
) -> None:
    """The real compiler: its kernels must run as they would unrecorded."""
    args = ("--how", "module", "--backend", "inductor", "--steps", "2")
    run = record("compiled.py", *args, "--out", "{dir}/recorded.pt", options=OP)
    recorded = final_parameters(run.parent / "recorded.pt")
    assert_same_bits(recorded, unrecorded(recordings, *args))
    assert sum(kind == "compiled" for _, kind, _ in records_of(run)) == 2


def test_a_change_inside_a_compiled_region_is_placed_in_the_region(record: Recorder) -> None:
    a = record("compiled.py", options=OP, tag="a")
    b = record("compiled.py", "--plant", options=OP)
    code, report = compare_json(a, b)
    first = report["first_divergence"]
    assert code == 1
    assert (first["step"], first["location"], first["kind"]) == (0, "Net", "output")
    assert first["origin"] is True
    assert "torch.compile region `Net`" in first["origin_text"]


@pytest.mark.parametrize("how", ["module", "fn"])
def test_a_region_compiled_in_one_run_only_is_named_as_the_cause(
    record: Recorder, how: str
) -> None:
    eager = record("compiled.py", "--how", "none", tag="eager")
    compiled = record("compiled.py", "--how", how, tag=how)
    for runs, which in (((eager, compiled), "B"), ((compiled, eager), "A")):
        code, report = compare_json(*runs)
        first = report["first_divergence"]
        assert code == 1
        assert (first["reason"], first["kind"]) == ("structure", "compiled")
        assert first["location"] == REGION[how]
        said = f"run {which} ran `{REGION[how]}` as a torch.compile region"
        assert first["origin_text"].startswith(said)
        assert first["cause"] == "configuration"
        assert "torch.compile compiled this code in one run only" in first["cause_text"]


def test_another_compile_backend_is_an_environment_difference(record: Recorder) -> None:
    eager = record("compiled.py", "--backend", "eager", tag="eager backend")
    aot = record("compiled.py", tag="aot_eager backend")
    code, report = compare_json(eager, aot)
    settings = {e["key"]: (e["a"], e["b"]) for e in report["environment_differences"]}
    assert settings["compile.0.backend"] == ("eager", "aot_eager")
    # AOT autograd accumulates the same parameter gradients in another order
    first = report["first_divergence"]
    assert (code, first["reason"], first["kind"]) == (1, "structure", "param_grad")
    assert first["cause"] == "configuration"
    assert "torch.compile was called with other settings" in first["cause_text"]


def test_compile_with_options_and_nested_regions_in_process(tmp_path: Path) -> None:
    """``torch.compile(**options)(model)`` stays a module; a compiled helper called from
    compiled code is part of that region (no graph break: ``fullgraph=True`` holds). Everything
    is compiled inside the recorder, as under ``diverge record`` (which patches at import)."""
    from torch import nn

    import divergence

    torch.manual_seed(0)
    with divergence.Recorder(tmp_path / "run"):

        @torch.compile(backend="aot_eager", fullgraph=True)
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = nn.Linear(4, 2)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return scale(self.fc(x))

        model = Net()
        compiled = torch.compile(backend="aot_eager", fullgraph=True)(model)
        assert isinstance(compiled, nn.Module)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            compiled(torch.randn(3, 4)).sum().backward()
            optimizer.step()
            scale(torch.ones(2))  # called eagerly: a region of its own
    regions = [name for _, kind, name in records_of(tmp_path / "run") if kind == "compiled"]
    assert regions.count("Net") == 2
    assert sum(name.endswith("scale>") for name in regions) == 2


def test_keyword_arguments_into_a_compiled_region_are_its_inputs(tmp_path: Path) -> None:
    """A compiled module and a compiled function called with keywords: the keyword tensors are
    recorded as inputs after the positional ones, at the region's boundary."""
    from torch import nn

    import divergence

    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * mask

    def shift(x: torch.Tensor, *, by: torch.Tensor) -> torch.Tensor:
        return x + by

    torch.manual_seed(0)
    with divergence.Recorder(tmp_path / "run"):
        model = torch.compile(Gate(), backend="eager")
        compiled_shift = torch.compile(shift, backend="eager")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            out = model(torch.randn(3, 4), mask=torch.ones(3, 1))
            compiled_shift(out, by=torch.zeros(1, 4)).sum().backward()
            optimizer.step()
    (process,) = Run.open(tmp_path / "run").processes
    file = process.load()
    step1 = file.records[file.records["step"] == 1]
    inputs = {
        (file.strings[r["name"]], int(r["slot"])): file.strings[r["shape"]]
        for r in step1
        if r["kind"] in (Kind.INPUT, Kind.BATCH)
    }
    region = f"<compiled {shift.__qualname__}>"
    assert inputs == {
        ("Gate", 0): "3,4",
        ("Gate", 1): "3,1",
        (region, 0): "3,4",
        (region, 1): "1,4",
    }


class GraphLog:
    """A torch.compile backend that runs each graph as it is and keeps its operations."""

    def __init__(self) -> None:
        self.graphs: list[list[tuple[str, str]]] = []

    def __call__(self, gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        # the placeholders' order follows which tensor dynamo saw first: sorted
        nodes = [(node.op, str(node.target)) for node in gm.graph.nodes]
        inputs_first = sorted(n for n in nodes if n[0] == "placeholder")
        self.graphs.append(inputs_first + [n for n in nodes if n[0] != "placeholder"])
        return gm.forward


def train_with_a_compiled_step(how: str, backend: GraphLog) -> dict[str, torch.Tensor]:
    """Adam on a small model for three steps, its step compiled: ``torch.compile(optimizer.step)``
    ("method"), in a compiled function ("fn", as PyTorch's tutorial on compiling the optimizer
    does), or the whole training step compiled ("train_step"). Returns the final parameters."""
    from torch import nn

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)

    def step() -> None:
        optimizer.step()

    def train_step(x: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        step()
        return loss

    if how == "method":
        step = torch.compile(optimizer.step, backend=backend)
    elif how == "fn":
        step = torch.compile(step, backend=backend)
    else:
        train_step = torch.compile(train_step, backend=backend)
    for _ in range(3):
        train_step(torch.randn(5, 4))
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("how", ["method", "fn", "train_step"])
def test_a_compiled_optimizer_step_is_a_step_and_the_graphs_are_unchanged(
    tmp_path: Path, how: str
) -> None:
    """Inside compiled code the step hook only notes the optimizer (a side effect dynamo
    replays); the step is recorded when the region is left. The compiled code is the user's:
    the same graphs as unrecorded (none added by a graph break or a recompilation), the same
    bits."""
    import divergence

    plain_graphs, recorded_graphs = GraphLog(), GraphLog()
    plain = train_with_a_compiled_step(how, plain_graphs)
    with divergence.Recorder(tmp_path / "run"):
        recorded = train_with_a_compiled_step(how, recorded_graphs)
    torch._dynamo.reset()
    assert_same_bits(recorded, plain)
    assert recorded_graphs.graphs == plain_graphs.graphs
    records = records_of(tmp_path / "run", Phase.OPTIMIZER)
    params = [(step, name) for step, kind, name in records if kind == "param"]
    names = ("0.weight", "0.bias", "2.weight", "2.bias")
    if how == "train_step":  # the model only runs compiled: its parameters are the optimizer's
        names = tuple(f"Adam.group0.param{i}" for i in range(4))
    assert params == [(step, name) for step in range(3) for name in names]
    assert sum(kind == "optim_state" for _, kind, _ in records) == 3 * 4 * 3  # step, exp_avg(_sq)


def test_a_compiled_step_at_op_level_with_a_window_keeps_the_graphs(tmp_path: Path) -> None:
    """Op level's own step hooks do nothing while dynamo traces (traced, they guarded on the
    session's step: a recompilation, a frame without a graph, every step)."""
    from torch._dynamo.utils import counters

    import divergence

    plain_graphs, recorded_graphs = GraphLog(), GraphLog()
    counters.clear()
    plain = train_with_a_compiled_step("method", plain_graphs)
    plain_frames = counters["frames"]["total"]
    counters.clear()
    with divergence.Recorder(tmp_path / "run", granularity="op", steps="0:2"):
        recorded = train_with_a_compiled_step("method", recorded_graphs)
    torch._dynamo.reset()
    assert_same_bits(recorded, plain)
    assert recorded_graphs.graphs == plain_graphs.graphs
    assert counters["frames"]["total"] <= plain_frames  # (the first run also warms torch up)
    assert {step for step, _, _ in records_of(tmp_path / "run")} == {0, 1}


def test_steps_of_code_compiled_before_the_recorder_are_all_recorded(tmp_path: Path) -> None:
    """``torch.compile`` called before ``divergence.Recorder`` is entered: its steps are
    recorded at the next model call, and the last one at exit."""
    from torch import nn

    import divergence

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = torch.compile(optimizer.step, backend="eager")
    with divergence.Recorder(tmp_path / "run"):
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(5, 4)).pow(2).mean().backward()
            step()
    torch._dynamo.reset()
    records = records_of(tmp_path / "run", Phase.OPTIMIZER)
    assert [step for step, kind, name in records if name == "0.weight"] == [0, 1, 2]


def test_a_whole_step_compiled_with_no_eager_model_call_keeps_the_graphs(
    tmp_path: Path,
) -> None:
    """``torch._dynamo.optimize`` around a whole training step: nothing of ours runs between
    the compiled calls to take the steps, so they are recorded together at exit; the list
    that notes them stays short, so dynamo recompiles at most twice, never up to its limit."""
    from torch import nn

    import divergence

    def train(backend: GraphLog) -> dict[str, torch.Tensor]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        @torch._dynamo.optimize(backend)
        def train_step(x: torch.Tensor) -> torch.Tensor:
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
            return loss

        for _ in range(12):
            train_step(torch.randn(5, 4))
        return {k: v.clone() for k, v in model.state_dict().items()}

    plain_graphs, recorded_graphs = GraphLog(), GraphLog()
    plain = train(plain_graphs)
    with divergence.Recorder(tmp_path / "run"):
        recorded = train(recorded_graphs)
    torch._dynamo.reset()
    assert_same_bits(recorded, plain)
    assert recorded_graphs.graphs == plain_graphs.graphs
    names = [name for _, kind, name in records_of(tmp_path / "run", Phase.OPTIMIZER)]
    assert names.count("SGD.group0.param0") == 2


def test_an_eager_then_a_compiled_optimizer_make_two_steps(tmp_path: Path) -> None:
    """One optimizer stepped eagerly, then another one's compiled step: the region's records
    open a step of their own (two eager optimizers stepping back to back share one). At entry
    a region is not known to hold a step; the runs compare alike either way."""
    from torch import nn

    import divergence

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with divergence.Recorder(tmp_path / "run"):
        first = torch.optim.Adam(model[0].parameters(), lr=0.1)
        second = torch.optim.SGD(model[2].parameters(), lr=0.1)
        compiled_first = torch.compile(first.step, backend="eager")
        for _ in range(3):
            first.zero_grad()
            second.zero_grad()
            model(torch.randn(5, 4)).pow(2).mean().backward()
            second.step()
            compiled_first()
    torch._dynamo.reset()
    records = records_of(tmp_path / "run", Phase.OPTIMIZER)
    assert [step for step, kind, name in records if name == "2.weight"] == [0, 2, 4]
    assert [step for step, kind, name in records if name == "0.weight"] == [1, 3, 5]


def test_a_model_freed_while_compiled_code_runs_compiles_nothing_of_the_recorder(
    tmp_path: Path,
) -> None:
    """Freeing a model runs the recorder's finalizer (it fingerprints weights written after
    the last step). A model freed by compiled code (a side effect dynamo replays) runs it while
    dynamo's frame callback is set: the finalizer and what it calls must run eagerly, never
    compiled into graphs of the user's (the flaky extra ``_tensor_version`` graph)."""
    from torch import nn

    import divergence

    graphs = GraphLog()
    with divergence.Recorder(tmp_path / "run"):
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        with torch.no_grad():
            model.weight.add_(1.0)  # a write after the last step: the finalizer fingerprints it
        holder = [model]
        del model

        def release(x: torch.Tensor) -> torch.Tensor:
            y = x * 2
            holder.clear()  # the model's last reference: freed by the replayed side effect
            return y

        torch.compile(release, backend=graphs)(torch.ones(2))
        assert not holder
    torch._dynamo.reset()
    assert graphs.graphs == [
        [
            ("placeholder", "L_x_"),
            ("call_function", "<built-in function mul>"),
            ("output", "output"),
        ]
    ]
    written = [(kind, name) for step, kind, name in records_of(tmp_path / "run", Phase.OPTIMIZER)]
    assert written[-1] == ("param", "weight")  # the write, seen when the model was freed
