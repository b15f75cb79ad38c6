"""The cause section: three lines by default (what, evidence, fix), the whole explanation with
``--explain``."""

from __future__ import annotations

from tests.harness.cli import run_cli

PAIR = ("sample_runs/data_order/a", "sample_runs/data_order/b")


def cause_section(*options: str) -> list[str]:
    result = run_cli("compare", *options, *PAIR)
    assert result.returncode == 1, result.stderr
    section = result.stdout.split("Likely cause: ", 1)[1].split("\n\n", 1)[0]
    return section.splitlines()


def test_the_cause_takes_four_lines_at_most() -> None:
    lines = cause_section()
    assert len(lines) <= 4
    assert lines[0] == "data"
    assert lines[2].startswith("  Evidence: the batch `dataloader` differs at step 0")
    assert lines[3].startswith("  Fix: DataLoader(generator=torch.Generator().manual_seed(s))")
    assert lines[3].endswith("(--explain: why, and more)")


def test_explain_gives_the_whole_explanation() -> None:
    text = " ".join(line.strip() for line in cause_section("--explain"))
    assert "in_order=False" in text and "worker_init_fn" in text
    assert len(cause_section("--explain")) > 4
