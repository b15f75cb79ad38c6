"""The zygote of :mod:`tests.harness.zygote`: imports a framework once, then forks for each
client a child that becomes ``python SCRIPT ARGS``. Standard library only (besides what it
preloads); started as ``python -c "...; zygote_server.serve(...)"`` so that ``__main__`` is free
for the script."""

import atexit
import builtins
import contextlib
import importlib
import importlib.machinery
import io
import json
import os
import random
import signal
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# not PR_SET_PDEATHSIG: it fires when the thread that started the zygote ends
PARENT_CHECKED_EVERY = 5.0  # seconds


def serve(socket_path: str, modules: list) -> None:
    """Preload ``modules``, listen on ``socket_path``; in a forked child, return to run the
    script as the program (so that its exceptions are Python's own; its exit too, less the
    teardown of every module, see :func:`_exit_now`)."""
    parent = os.getppid()
    for name in modules:
        importlib.import_module(name)
    base_path = [entry for entry in sys.path if entry not in ("", HERE)]
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    listener.settimeout(PARENT_CHECKED_EVERY)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone, and so are its clients
                return
            continue
        connection.settimeout(None)
        if os.fork() == 0:
            listener.close()
            _handle(connection, base_path)
            return
        connection.close()


def _handle(connection: socket.socket, base_path: list) -> None:
    """In the handler: read the request, fork the program, report its pid and how it ended.
    Returns only in the program's process, set up as ``python ARGV`` would be."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    request, fds = _receive(connection)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _become_program(request, fds, base_path)
        return
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        ended = f"signal {os.WTERMSIG(status)}"
    else:
        ended = f"exit {os.WEXITSTATUS(status)}"
    with contextlib.suppress(OSError):
        connection.sendall(f"{ended}\n".encode())
    os._exit(0)


def _receive(connection: socket.socket) -> tuple:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 16)
        if not more:
            os._exit(1)
        data += more
    return json.loads(data), fds


def _become_program(request: dict, fds: list, base_path: list) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    script = argv[0]
    sys.argv = list(argv)
    sys.orig_argv = [request["python"], *(["-u"] if request["unbuffered"] else []), *argv]
    if request["unbuffered"]:
        _unbuffered_streams()
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.abspath(p) for p in extra] + base_path
    importlib.invalidate_caches()
    _fresh_seeds()
    sys.excepthook = _without_own_frames(sys.__excepthook__)
    if any(os.path.isfile(os.path.join(p, "sitecustomize.py")) for p in extra):
        sys.modules.pop("sitecustomize", None)
        importlib.import_module("sitecustomize")
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    _run_as_main(script)


def _unbuffered_streams() -> None:
    """``sys.stdout`` and ``sys.stderr`` as ``python -u`` makes them: every write reaches the
    file at once."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw, old.encoding, old.errors, write_through=True)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _fresh_seeds() -> None:
    """What a new process would draw: the modules preloaded here seeded themselves once."""
    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _without_own_frames(hook: object) -> object:
    """``hook`` given the traceback from the script's first frame on, as Python prints it."""

    def excepthook(kind: type, value: BaseException, trace: object) -> None:
        while trace is not None and trace.tb_frame.f_code.co_filename in (__file__, "<string>"):
            trace = trace.tb_next
        hook(kind, value.with_traceback(trace), trace)

    return excepthook


def _run_as_main(script: str) -> None:
    main = sys.modules["__main__"]
    namespace = main.__dict__
    namespace.clear()
    namespace.update(
        __name__="__main__",
        __file__=script,
        __builtins__=builtins,
        __doc__=None,
        __package__=None,
        __spec__=None,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", script),
    )
    with open(script, "rb") as file:
        code = compile(file.read(), script, "exec")
    try:
        exec(code, namespace)
    except SystemExit as ended:
        if ended.code is not None and not isinstance(ended.code, int):
            raise  # Python prints it: left to Python's own exit
        _exit_now(ended.code or 0)
    _exit_now(0)  # an uncaught exception is left to Python's own exit


def _exit_now(status: int) -> None:
    """End as Python's own exit would, less its teardown of every module (about 1 s with
    torch._dynamo loaded, 0.7 s with tensorflow): threads joined, ``atexit`` handlers run,
    the program's globals freed (their files closed), standard streams flushed."""
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # what Python's exit waits for first
    atexit._run_exitfuncs()
    sys.modules["__main__"].__dict__.clear()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = 120  # as Python exits when it cannot flush them
    os._exit(status)
