"""The record layout facts that readers rely on."""

from __future__ import annotations

import numpy as np
import pytest

from divergence.errors import CorruptRunError
from divergence.store.reader import STRING_FIELDS, _string_ids
from divergence.store.schema import RECORD_DTYPE, parse_shape


def test_string_id_fields_are_adjacent_for_the_one_pass_validation() -> None:
    fields = RECORD_DTYPE.fields
    assert fields is not None
    offsets = [fields[name][1] for name in STRING_FIELDS]
    assert offsets == [offsets[0] + 4 * i for i in range(4)]
    records = np.zeros(2, dtype=RECORD_DTYPE)
    records["note"] = [0, 7]
    assert _string_ids(records).tolist() == [[0, 0, 0, 0], [0, 0, 0, 7]]


def test_a_record_is_39_packed_bytes() -> None:
    assert RECORD_DTYPE.itemsize == 39  # docs/FORMAT.md says so; compare reads millions


def test_a_shape_that_is_not_sizes_is_a_corrupt_record_naming_the_file() -> None:
    assert parse_shape("64,256") == (64, 256)
    assert parse_shape("") == ()
    with pytest.raises(CorruptRunError, match=r"runs/a\.h5: a record's shape 'tensor\(8\)'"):
        parse_shape("tensor(8)", "runs/a.h5")
