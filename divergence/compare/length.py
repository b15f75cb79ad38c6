"""A *length* divergence: one run ends first while every record both hold matched. Says where
and how the shorter run ended: inside a step, by an exception, killed, or cleanly."""

from __future__ import annotations

import numpy as np

from divergence.compare.model import Divergence, Facts, Reason
from divergence.compare.records import probe_at
from divergence.store.reader import RunFile
from divergence.store.schema import Kind, Phase


def ended_inside_step(key: str, a: RunFile, b: RunFile, row: int) -> Divergence | None:
    """A length divergence where the records part because one process stopped inside a step:
    its records of that step end (at ``row``) where the other run's go on. It raised there, or
    its last step ended early (a fit stopped by EarlyStopping after a validation pass that the
    other run followed with a training step)."""
    for file, which, other in ((a, "A", b), (b, "B", a)):
        step = file.ended_inside_step
        records = file.records
        if records["kind"][row] != Kind.STEP_END:
            continue
        at = probe_at(other, row)
        if step is not None and records["step"][row] == step:
            raised = _raised(file)
            origin = f"run {which} ended inside step {step}, raising {raised}, before"
        elif (
            row == records.size - 1
            and other.steps_complete > file.steps_complete
            and at.phase in NEW_PASS_PHASES  # a new pass, not more records of the same one
        ):
            step = int(records["step"][row])
            closed = "" if file.complete else " (the process was not closed: killed or crashed)"
            raised = _raised(file, ", raising ")
            origin = f"run {which}'s last step, {step}, ends{closed}{raised} before"
        else:
            continue
        text = (
            f"{origin} the {at.label} ({at.phase}) that the other run recorded next; every "
            "record before matched"
        )
        return _ended(key, step, text, file)
    return None


# where a pass over a batch starts: another training step after a validation pass, say
NEW_PASS_PHASES = frozenset({Phase.RNG, Phase.DATA, Phase.FORWARD})


def _ended(key: str, step: int, text: str, file: RunFile) -> Divergence:
    """A length divergence at ``step`` where ``file``'s run ended (``text`` says how), with
    how its process ended, for the causes and the ranks' picture: cleanly (``ended``), or by
    an exception a collective raises when its peer vanished (``lost_peer``)."""
    facts = Facts(
        ended="cleanly" if _ended_cleanly(file) else "",
        lost_peer="yes" if lost_peer(file.uncaught) else "",
    )
    return Divergence(
        Reason.LENGTH, key, step, Phase.MARKER, Kind.STEP_END, "", 0, origin_text=text, facts=facts
    )


# what a collective raises when a peer process vanished (gloo's TCP pairs, the TCP store,
# NCCL's watchdog); not a timeout in general, which a rank's own code can raise
LOST_PEER = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "DistNetworkError",
    "remote process exited",
    "Socket Timeout",
)


def lost_peer(uncaught: str) -> bool:
    """Whether an uncaught exception's text is one a collective raises when a peer vanished.

    >>> lost_peer("RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    True
    >>> lost_peer("RuntimeError: DataLoader worker (pid 123) timed out after 5 seconds")
    False
    """
    return any(words in uncaught for words in LOST_PEER)


def _ended_cleanly(file: RunFile) -> bool:
    """Not killed, not crashed, recorded to the end: closed with exit status 0, no failure."""
    return file.complete and file.exit_status == 0 and not (file.end or {}).get("failure")


def _raised(file: RunFile, prefix: str = "") -> str:
    """The exception that ended the process, shortened, after ``prefix``; "" if none."""
    raised = shortened(file.uncaught)
    return f"{prefix}{raised}" if raised else ""


def shortened(error: str) -> str:
    """An exception's text on one line; a long one keeps its start (the type) and its end,
    where a wrapped error's innermost message is (a collective's peer that vanished), both cut
    between words.

    >>> shortened("RuntimeError: callback failed: " * 5 + "Connection closed by peer")[-40:]
    'llback failed: Connection closed by peer'
    >>> shortened("RuntimeError: callback failed: " * 5).split(" ... ")[0]
    'RuntimeError: callback failed:'
    """
    text = " ".join(error.split())
    if len(text) <= 125:
        return text
    head, tail = text[:40], text[-80:]
    head = head[: head.rfind(" ")] if " " in head[20:] else head
    tail = tail[tail.find(" ") + 1 :] if " " in tail[:40] else tail
    return f"{head} ... {tail}"


def length_divergence(key: str, a: RunFile, b: RunFile, n: int) -> Divergence:
    shorter, longer, which = (a, b, "A") if a.records.size <= b.records.size else (b, a, "B")
    if a.records.size == b.records.size:  # same records, but one process did not close its file
        shorter, which = (a, "A") if not a.complete else (b, "B")
    last = probe_at(shorter, n - 1) if n else None
    # with nothing in common, where the longer run starts: a resumed run's first step
    step = last.step + 1 if last else int(longer.records["step"][0]) if longer.records.size else 0
    common = n - int(np.searchsorted(shorter.step_ends, n))  # step-end markers are not records
    config = shorter.meta.get("record_config")
    window = config.get("steps", "") if isinstance(config, dict) else ""
    stopped = isinstance(window, str) and ":" in window and not window.endswith(":")
    limited = f" (recorded with --steps {window})" if stopped else ""
    ends = f"ends after {shorter.steps_complete} complete steps"
    goes_on = f"has {longer.steps_complete}"
    inside = longer.ended_inside_step
    if inside is not None and longer.steps.size and inside == int(longer.steps[-1]):
        # its last step is the one an exception ended: written, not complete
        goes_on = f"has {longer.steps_complete - 1} and ended inside step {inside}"
    # step numbers, not counts: lined up across a resume, or read from a later --steps start
    if (shorter.source_rows is not None or longer.source_rows is not None) and longer.steps.size:
        ends = (
            f"ends before step {step}" if not shorter.steps.size else f"ends after step {step - 1}"
        )
        goes_on = f"goes on to step {int(longer.steps[-1])}"
    text = (
        f"run {which} {ends}{limited}"
        f"{'' if shorter.complete else ' and was not closed (killed or crashed)'}"
        f"{_raised(shorter, ', raising ')}; "
        f"the other run {goes_on}; all {common:,} common records match"
    )
    return _ended(key, step, text, shorter)
