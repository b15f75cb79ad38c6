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
    assert lines[0] == "seeds"  # the loader's own generator, seeded from OS entropy
    assert lines[2].startswith("  Evidence: dataloaders.0.generator: own, initial seed")
    assert lines[3].startswith("  Fix: seed the loader's generator with the same fixed value")
    assert lines[3].endswith("(--explain: why, and more)")


def test_explain_gives_the_whole_explanation() -> None:
    text = " ".join(line.strip() for line in cause_section("--explain"))
    assert "DataLoader(generator=torch.Generator().manual_seed(s))" in text
    assert "workers' seeds differ" in text
    assert len(cause_section("--explain")) > 4
