"""Golden tests: the rendered report of each bundled pair, at 100 columns, colour off.

The pairs are fixed files, so the text is the same on every machine. After an intended change
of the report, regenerate with ``python tests/test_golden_reports.py`` and review the diff.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from divergence.compare import compare_runs
from divergence.report.terminal import render_text

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
PAIRS = (
    "identical",
    "threads",
    "init",
    "data_order",
    "truncated",
    "keras/onednn",
    "keras/tfdata",
    "keras/flip",
)


def pair_paths(pair: str) -> tuple[str, str]:
    if pair.startswith("keras/"):
        name = pair.split("/")[1]
        return f"sample_runs/keras/{name}_a", f"sample_runs/keras/{name}_b"
    return f"sample_runs/{pair}/a", f"sample_runs/{pair}/b"


def rendered(pair: str) -> str:
    return render_text(compare_runs(*pair_paths(pair)), width=100)


def golden_file(pair: str) -> Path:
    return GOLDEN / f"{pair.replace('/', '_')}.txt"


@pytest.mark.parametrize("pair", PAIRS)
def test_report_matches_golden(pair: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    expected = golden_file(pair).read_text().splitlines()
    actual = [line.rstrip() for line in rendered(pair).splitlines()]
    assert actual == expected
    assert all(len(line) <= 100 for line in actual)


def test_the_readme_shows_the_threads_report_as_compare_renders_it() -> None:
    """The README's "A real report" is the ``threads`` golden, so it cannot go stale."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("```text\nDIVERGED (value) at step 0, forward: output of classifier.1")
    block = readme[start:].split("\n", 1)[1].split("```", 1)[0]
    assert block == golden_file("threads").read_text()


@pytest.mark.parametrize("width", [40, 48, 60])
def test_a_narrow_environment_table_breaks_keys_at_separators(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    text = render_text(compare_runs(*pair_paths("threads")), width=width)
    table = text.split("Environment differences\n", 1)[1].split("\n\n", 1)[0]
    whole = ("env.OMP_NUM_THREADS", "threads.torch.get_num_threads")
    keys, current = [], ""
    for line in table.splitlines()[1:]:
        part = line[2:].split("  ")[0]
        current += part
        if current in whole:
            keys.append(current)
            current = ""
        else:  # (a key is broken after a separator only)
            assert part.endswith((".", "_")), table
    assert keys == list(whole), table


if __name__ == "__main__":  # regenerate the golden files
    import os

    os.chdir(ROOT)
    for name in PAIRS if len(sys.argv) == 1 else sys.argv[1:]:
        text = "\n".join(line.rstrip() for line in rendered(name).splitlines()) + "\n"
        golden_file(name).write_text(text)
        print(f"wrote {golden_file(name)}")
