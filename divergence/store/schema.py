"""The on-disk run format, written down in one place (see docs/FORMAT.md).

A run is a directory with one HDF5 file per recorded process: ``rank<R>.h5`` when ``RANK`` is set,
else ``pid<PID>.h5``. Each file holds:

* attrs ``diverge_format`` (= :data:`FORMAT_MARKER`, fixed-length bytes) and ``format_version``
  (= :data:`FORMAT_VERSION`), and no other;
* ``meta`` (JSON: command, versions, environment, determinism settings), ``end`` (JSON, written
  at a clean exit) and ``exit`` (``{"status": N}``, written by ``diverge record`` when the
  command ends): uint8 datasets of UTF-8 JSON, each with a ``crc32`` attr;
* ``records``: a chunked, resizable 1-D compound dataset of :data:`RECORD_DTYPE`, in execution
  order; every block of a step ends with a :attr:`Kind.STEP_END` marker whose ``fp`` is
  ``step ^ STEP_END_MAGIC`` and whose string fields hold the checks (:func:`step_end_row`);
* ``strings``: a uint8 blob, each string a u4 little-endian length then its UTF-8 bytes;
  ``name``, ``dtype``, ``shape`` and ``note`` fields index it (a note is codes:
  store/notes.py);
* ``tensors/<row>``: full copies of the records that were dumped (``dump == 1``), with the attrs
  ``dtype`` (torch-style name, fixed-length bytes) and ``crc32``; dtypes numpy lacks are stored
  as unsigned bit views.

Format 1 (read still, by ``store/read_v1.py``) held ``meta``, ``end`` and the marker as
variable-length string attributes, ``strings`` as variable-length strings, and no checks.
"""

from __future__ import annotations

import struct
from enum import IntEnum, StrEnum

import numpy as np

from divergence.errors import CorruptRunError

FORMAT_MARKER = "diverge-run"
FORMAT_VERSION = 2
FORMAT_V1 = 1  # still read: no checksums, variable-length strings (store/read_v1.py)
STEP_END_MAGIC = 0xD1BE_26E5_0000_5EED
RECORDS = "records"
STRINGS = "strings"
TENSORS = "tensors"
CHUNK_RECORDS = 2048  # rows per chunk (78 KiB): small runs stay small
META, END = "meta", "end"  # format 2: uint8 datasets of JSON; format 1: string attributes
EXIT = "exit"  # format 2: {"status": N} as JSON, by ``diverge record``; format 1: ``exit_status``
CRC_ATTR = "crc32"  # format 2: the zlib CRC-32 of a dataset's bytes (meta, end, a dump)
DTYPE_ATTR = "dtype"  # a dump's torch-style dtype name
CHUNK_STRING_BYTES = 16384  # the strings blob's chunk
STRING_LENGTH = struct.Struct("<I")  # before each string's UTF-8 bytes in the strings blob


class Phase(IntEnum):
    """Where in a training step a record was taken (what a user reads as 'phase'): its int
    value in files, its label in text.

    >>> f"{Phase.FORWARD}", str(Phase.INIT), int(Phase.FORWARD)
    ('forward', 'init', 4)
    """

    MARKER = 0
    INIT = 1
    RNG = 2
    DATA = 3
    FORWARD = 4
    BACKWARD = 5
    OPTIMIZER = 6
    COMMUNICATION = 7

    @property
    def label(self) -> str:
        return self.name.lower()

    # read as their labels in text; the int value stays what files hold
    def __str__(self) -> str:
        return self.label

    def __format__(self, spec: str) -> str:
        return format(self.label, spec)


class Kind(IntEnum):
    """What a record fingerprints: its int value in files, its label in text.

    >>> f"{Kind.PARAM_GRAD:>12}", int(Kind.PARAM_GRAD)
    ('  param_grad', 4)
    """

    INVALID = 0  # zero-filled rows of a torn write read as this
    INPUT = 1  # a module's (or op's) input
    OUTPUT = 2  # a module's (or op's) output
    GRAD_OUTPUT = 3  # gradient flowing into a module's output
    PARAM_GRAD = 4  # a parameter's accumulated gradient
    PARAM = 5  # a parameter's value (init, or after an optimizer step)
    OPTIM_STATE = 6  # an optimizer state tensor after its step
    LOSS = 7  # the tensor passed to backward()
    RNG_STATE = 8  # a random generator's state at a step start
    BATCH = 9  # a data batch (root module inputs, DataLoader batches)
    PROBE = 10  # an explicit divergence.probe()
    BUFFER = 11  # a module buffer (running statistics) after an optimizer step
    OP_INPUT = 12
    OP_OUTPUT = 13
    COLLECTIVE_IN = 14
    COLLECTIVE_OUT = 15
    COMPILED = 16  # a torch.compile region was entered here: its inside is not observed
    HYPERPARAM = 17  # an optimizer hyperparameter (lr, betas...) of a param group at its step
    STEP_END = 255

    @property
    def label(self) -> str:
        return self.name.lower()

    # read as their labels in text; the int value stays what files hold
    def __str__(self) -> str:
        return self.label

    def __format__(self, spec: str) -> str:
        return format(self.label, spec)


# the values a recorder writes (a record with another was damaged: a flipped byte)
PHASE_VALUES = frozenset(int(p) for p in Phase)
KIND_VALUES = frozenset(int(k) for k in Kind)


class Status(IntEnum):
    OK = 0
    SKIPPED = 1  # not fingerprinted: ``note`` says why (meta tensor, nested tensor, ...)


# 39 bytes a record: compare reads millions of them, so every byte counts.
RECORD_DTYPE = np.dtype(
    [
        ("step", "<i8"),
        ("fp", "<u8"),
        ("name", "<u4"),  # strings[name]: module path, parameter name, probe name
        ("dtype", "<u4"),  # strings[dtype]: torch-style dtype name
        ("shape", "<u4"),  # strings[shape]: "64,256"; "" for a scalar
        ("note", "<u4"),  # strings[note]: codes (store/notes.py): why skipped, a detail; 0 = none
        ("slot", "<u2"),  # position in a flattened pytree (output 0, 1, ...)
        ("phase", "u1"),
        ("kind", "u1"),
        ("algo", "u1"),
        ("status", "u1"),
        ("dump", "u1"),  # 1 when tensors/<row> holds a full copy
    ]
)
# The same layout for packing one row from Python values (about half the cost of building a
# structured array from tuples, which the recorder pays every step).
RECORD_STRUCT = struct.Struct("<qQIIIIHBBBBB")
assert RECORD_STRUCT.size == RECORD_DTYPE.itemsize
# A row without its leading ``step``: the recorder packs each row as it is buffered (the step
# it belongs to is known only when the step is written) and :func:`join_rows` puts the step in.
ROW_STRUCT = struct.Struct("<QIIIIHBBBBB")
STEP_STRUCT = struct.Struct("<q")
assert STEP_STRUCT.size + ROW_STRUCT.size == RECORD_STRUCT.size
pack_row = ROW_STRUCT.pack
MAX_DIMS = 8  # used by in-graph probe tables (frameworks/tensorflow)


class ParamCheck(StrEnum):
    """Where a torch recorder fingerprints parameters again, whatever their version counters
    say; listed in the metadata's ``param_checks``. A run without them (an older diverge's)
    may have missed a write through ``.data`` or one inside an optimizer step."""

    STEP_START = "step_start"  # every parameter a model reads, at its first call in a step
    IN_STEP = "in_step"  # moved ones at each model call inside an optimizer step (LBFGS)


# DDP's gradient buckets are recorded as collectives named ddp.bucket0, ddp.bucket1, ...
DDP_BUCKET = "ddp.bucket"
# point-to-point messages are recorded as collectives send#0 and recv#0, noted with their peer
# (store/notes.py)
SEND, RECEIVE = "send", "recv"


def message_direction(name: str) -> str:
    """``"send"`` or ``"recv"`` for a point-to-point message's record, ``""`` for any other.

    >>> message_direction("recv#2"), message_direction("all_reduce#0")
    ('recv', '')
    """
    op = name.split("#", 1)[0]
    return op if op in (SEND, RECEIVE) and "#" in name else ""


# Names of the batch records of what a loss reads besides the model's output (Keras fit)
TARGETS, SAMPLE_WEIGHT = "targets", "sample_weight"
LOSS_INPUTS = (TARGETS, SAMPLE_WEIGHT)

# The ``call`` of the metadata ``seeds`` entry a DataLoader with its own generator adds for
# each epoch: the base seed it drew
LOADER_SEED = "DataLoader epoch base seed"


def shape_text(shape: tuple[int, ...]) -> str:
    """How a shape is stored in ``strings``: ``(64, 256)`` -> ``"64,256"``; ``()`` -> ``""``."""
    return ",".join(map(str, shape))


def parse_shape(text: str, path: object = "") -> tuple[int, ...]:
    """``"64,256"`` -> ``(64, 256)``; text that is not a shape is a corrupt record of ``path``."""
    try:
        return tuple(int(x) for x in text.split(",")) if text else ()
    except ValueError:
        raise CorruptRunError(
            f"{path}: a record's shape {text!r} is not a list of sizes",
            hint="the file was damaged, or written by a recorder with a bug: record it again",
        ) from None


def step_end_fp(step: int) -> int:
    """The ``fp`` value that marks a genuine end-of-step marker (guards torn writes)."""
    return (step ^ STEP_END_MAGIC) & ((1 << 64) - 1)


def join_rows(step: int, rows: list[bytes]) -> bytes:
    """Rows packed by :func:`pack_row` (the fields after ``step``), as file bytes of ``step``:
    the step's 8 bytes are the separator of one join, put before every row.

    >>> row = pack_row(1, 2, 3, 4, 5, 0, 4, 2, 1, 0, 0)
    >>> join_rows(3, [row, row]) == RECORD_STRUCT.pack(3, 1, 2, 3, 4, 5, 0, 4, 2, 1, 0, 0) * 2
    True
    """
    return STEP_STRUCT.pack(step).join([b"", *rows])


# Format 2: the fields of a step-end marker that hold its checks (its string fields, which no
# marker uses): the CRC-32 of its block's rows, the strings blob's length in bytes once the
# step's strings were written, and the CRC-32 of the blob up to that length. ``note`` stays 0.
MARKER_BLOCK_CRC, MARKER_STRINGS_BYTES, MARKER_STRINGS_CRC = "name", "dtype", "shape"
MARKER_CHECKS = (MARKER_BLOCK_CRC, MARKER_STRINGS_BYTES, MARKER_STRINGS_CRC)


def is_format_marker(value: object) -> bool:
    """Whether an attribute is the run marker: fixed-length bytes (format 2) or a string (1).

    >>> is_format_marker(np.bytes_(b"diverge-run")), is_format_marker("diverge-run")
    (True, True)
    >>> is_format_marker(b"other"), is_format_marker(None)
    (False, False)
    """
    if isinstance(value, bytes):  # np.bytes_ too
        return value == FORMAT_MARKER.encode()
    return isinstance(value, str) and value == FORMAT_MARKER


def step_end_row(
    step: int, block_crc: int = 0, strings_bytes: int = 0, strings_crc: int = 0
) -> bytes:
    """The end-of-step marker row that closes every step's block, with its checks (format 2:
    see :data:`MARKER_CHECKS`)."""
    return RECORD_STRUCT.pack(
        step,
        step_end_fp(step),
        block_crc,
        strings_bytes,
        strings_crc,
        0,
        0,
        Phase.MARKER,
        Kind.STEP_END,
        0,
        0,
        0,
    )
