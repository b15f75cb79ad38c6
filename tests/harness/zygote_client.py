"""The ``python`` a forked recording runs (see :mod:`tests.harness.zygote`): standard library
only, started with ``-IS`` so that it neither reads PYTHONPATH nor runs the injected
``sitecustomize`` itself."""

import array
import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(socket_path: str, python: str, prefixes: tuple, excluded: tuple, at_import: dict) -> None:
    """Run ``python ARGV`` through the zygote at ``socket_path``, or as a real ``python`` when
    a variable named by ``prefixes`` (but not ``excluded``) differs from ``at_import``."""
    argv = sys.argv[1:]
    read = {n for n in os.environ if n.startswith(prefixes) and not n.startswith(excluded)}
    same = all(os.environ.get(name) == at_import.get(name) for name in read | set(at_import))
    unbuffered = argv[:1] == ["-u"]  # how torchrun starts its workers
    script_argv = argv[1:] if unbuffered else argv
    if not same or not _a_script(script_argv):
        _log("env" if not same else "command", argv)
        os.execv(python, [python, *argv])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
        request = {"argv": script_argv, "env": dict(os.environ), "cwd": os.getcwd()}
        _send(sock, {**request, "python": python, "unbuffered": unbuffered})
        replies = sock.makefile("r")
        pid = int(replies.readline())
    except (OSError, ValueError):  # not up yet, or gone: nothing was run
        _log("down", argv)
        os.execv(python, [python, *argv])
    _log("forked", argv)
    for signum in FORWARDED:
        signal.signal(signum, lambda number, frame: os.kill(pid, number))
    _exit_like(replies.readline())


def _log(how: str, argv: list) -> None:
    """One line to the file ``DIVERGE_TEST_ZYGOTE_LOG`` names, if any: forked, or why not."""
    path = os.environ.get("DIVERGE_TEST_ZYGOTE_LOG")
    if path:
        with open(path, "a") as log:
            log.write(f"{how} {' '.join(argv)}\n")


def _a_script(argv: list) -> bool:
    return bool(argv) and argv[0].endswith(".py") and os.path.isfile(argv[0])


def _send(sock: socket.socket, request: dict) -> None:
    """The request as one JSON line, with this process's stdin, stdout and stderr attached."""
    payload = json.dumps(request).encode() + b"\n"
    fds = array.array("i", [0, 1, 2])
    sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])


def _exit_like(status: str) -> None:
    """Exit as the forked child did: ``"exit N"`` or ``"signal N"``."""
    how, number = status.split() if status.strip() else ("exit", "1")
    if how == "signal":
        if int(number) != signal.SIGKILL:
            signal.signal(int(number), signal.SIG_DFL)
        os.kill(os.getpid(), int(number))
    os._exit(int(number) if how == "exit" else 128 + int(number))
