"""Between runs of different recorder versions, a setting the older one did not record yet is
no difference (the version difference is); one both recorded, or an env var, still is."""

from __future__ import annotations

from divergence.compare.environment import environment_differences

OLD = {"diverge_version": "0.1.0", "env": {}, "threads": {"torch": 2}}
NEW = {
    "diverge_version": "0.10.0",
    "env": {"OMP_NUM_THREADS": "2"},
    "threads": {"torch": 1},
    "dataloaders": {"0": {"batch_size": 64, "num_workers": 0}},
}


def test_settings_an_older_recorder_did_not_record_are_no_difference() -> None:
    keys = {d.key for d in environment_differences(OLD, NEW)}
    assert keys == {"diverge_version", "env.OMP_NUM_THREADS", "threads.torch"}


def test_the_same_recorder_still_shows_a_setting_one_run_lacks() -> None:
    same = {**OLD, "diverge_version": "0.10.0"}
    keys = {d.key for d in environment_differences(same, NEW)}
    assert "dataloaders.0.batch_size" in keys
