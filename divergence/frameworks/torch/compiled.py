"""``torch.compile``: a compiled region is recorded at its boundary and flagged, never changed.

While dynamo traces, every recorder hook returns at once (``TorchRecorder.eager_guard``): a
hook dynamo cannot trace (a hash, a weak reference) would break the graph, and another graph can
compute other bits. So the compiled code is the user's own, and the inside of a region is not
observed. The call into a region runs eagerly, and is recorded like a module call (its inputs,
outputs and the gradients into them) under the compiled module's name, after a
:attr:`Kind.COMPILED` record that says its inside is not observed. Op-level recording pops its
dispatch mode while a region runs, so the compiled kernels run as they would unrecorded.

Regions are entered three ways: an ``OptimizedModule`` (``torch.compile(model)``; its own
forward hooks fire eagerly), ``model.compile()`` and ``torch.compile(fn)`` (``torch.compile`` is
wrapped so the callable it returns marks the region). ``regions.py`` records the boundary.

An optimizer step taken inside compiled code (``torch.compile(optimizer.step)``) is noted by
the step hook with a side effect dynamo replays, and recorded when the region is left (see
``OptimizerSteps.step_post_hook`` in ``steps.py``).

>>> # torch.compile(model)(x)  ->  records: model input, COMPILED "model", model output
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

OPTIMIZED_MODULE = "OptimizedModule"


def compiled_module(module: torch.nn.Module) -> torch.nn.Module | None:
    """The module an ``OptimizedModule`` wraps, or None for any other module."""
    if type(module).__name__ != OPTIMIZED_MODULE:
        return None
    inner = getattr(module, "_orig_mod", None)
    return inner if isinstance(inner, torch.nn.Module) else None


def wrap_compile(
    enter: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any],
    leave: Callable[[Any], None],
    note: Callable[[dict[str, Any]], None] = lambda settings: None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A patch for ``torch.compile``: functions it returns call ``enter(owner, args, kwargs)``
    before and ``leave(output)`` after the compiled code. ``owner`` is the module of a compiled
    bound method (``model.compile()`` compiles ``model._call_impl``), else the function.
    ``note(settings)`` hears each call's :func:`compile_settings`."""

    def patch(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
            if model is None:  # @torch.compile(...) with options: the decorator torch returns
                return original(*args, **kwargs)  # calls torch.compile, this patch, again
            note(compile_settings(kwargs))
            compiled = original(model, *args, **kwargs)
            if isinstance(compiled, torch.nn.Module) or not callable(compiled):
                return compiled  # an OptimizedModule: its forward hooks mark the region
            return _region(compiled, model, enter, leave)

        return compile

    return patch


def _region(
    compiled: Callable[..., Any],
    source: Any,
    enter: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any],
    leave: Callable[[Any], None],
) -> Callable[..., Any]:
    owner = getattr(source, "__self__", None)
    owner = owner if isinstance(owner, torch.nn.Module) else source

    @functools.wraps(compiled)
    def region(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():  # called from code dynamo traces: part of that region
            return compiled(*args, **kwargs)
        enter(owner, args, kwargs)
        output = None
        try:
            output = compiled(*args, **kwargs)
            return output
        finally:  # also when the compiled code raises: the region is left either way
            leave(output)

    return region


def run_uncompiled(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, run eagerly even where dynamo would compile it: a finalizer the recorder
    registers can run while compiled code runs (a model freed by a side effect dynamo
    replays). Dynamo's frame callback is set then, and would compile the recorder's own code
    into graphs of the program's (see :func:`never_compiled`).

    >>> run_uncompiled(max, 2, 3)
    3
    """
    return fn(*args)


def never_compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its frames (and every frame they call) marked for dynamo to run as they are:
    the frame strategy ``torch.compiler.disable`` sets, without importing dynamo (a second of
    start-up) in a program that never compiles. For recorder code that runs while compiled
    code runs, in a frame dynamo would otherwise compile into graphs of the program's: a
    finalizer, a wrapper torch's own skipped code calls. (The mark is on the code object,
    shared by every closure of one ``def``.) A torch without the strategy compiles them.

    >>> never_compiled(run_uncompiled) is run_uncompiled
    True
    """
    eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    strategy = getattr(eval_frame, "_FrameExecStrategy", None)
    action = getattr(eval_frame, "_FrameAction", None)
    mark = getattr(eval_frame, "set_code_exec_strategy", None)
    if strategy is not None and action is not None and mark is not None:
        mark(fn.__code__, strategy(action.SKIP, action.SKIP))
    return fn


never_compiled(run_uncompiled)


def function_name(fn: Any) -> str:
    """How a compiled function is named in records: ``<compiled train_step>``."""
    return f"<compiled {getattr(fn, '__qualname__', type(fn).__name__)}>"


def compile_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a ``torch.compile`` call chose that changes the compiled code: another backend,
    mode or dynamic setting compiles other kernels (or orders the backward otherwise).

    >>> compile_settings({"backend": "aot_eager", "dynamic": True})
    {'backend': 'aot_eager', 'mode': None, 'dynamic': True, 'fullgraph': False, 'options': None}
    """
    backend = kwargs.get("backend", "inductor")
    if not isinstance(backend, str):  # a backend function of the program's own
        backend = getattr(backend, "__qualname__", type(backend).__name__)
    options = kwargs.get("options")
    return {
        "backend": backend,
        "mode": kwargs.get("mode"),
        "dynamic": kwargs.get("dynamic"),
        "fullgraph": bool(kwargs.get("fullgraph", False)),
        "options": None if options is None else repr(sorted(dict(options).items())),
    }
