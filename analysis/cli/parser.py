"""Command line: ``diffcoffea evaluate | optimize | scan | export | make-dataset`` (also ``python -m analysis``).

The top layer: it parses arguments and runs a command of :mod:`analysis.cli.commands`, which loads the config, asks the driver
(:class:`analysis.driver.runner.Evaluator`), the optimisation loop (:mod:`analysis.optimize.loop`)
or the grid scan (:mod:`analysis.optimize.scan`) for results, writes them and prints summaries.

Errors in the input (config, files, branches) print one line and exit with code 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.machinery
import logging
import os
import signal
import sys
import threading
import warnings
from typing import TYPE_CHECKING

from analysis import runtime
from analysis.cli.compilenote import CompileNotice
from analysis.errors import DiffcoffeaError, DiffcoffeaWarning, causes
from analysis.runtime.forkguard import ForkAfterJaxError

if TYPE_CHECKING:
    from analysis.cli.commands import (
        claim_run,
        json_safe,
        make_evaluator,
        output_dir,
        parse_grid,
        run_scan,
        write_json,
    )
    from analysis.cli.optimizecmd import run_optimize

# Re-exported from analysis.cli.commands (run_optimize: analysis.cli.optimizecmd) on
# first use (PEP 562): the parser, --help and --version import no command, so none of
# coffea, JAX, numba or matplotlib.
_FROM_COMMANDS = ("claim_run", "json_safe", "make_evaluator", "output_dir", "parse_grid",
                  "run_scan", "write_json")


def __getattr__(name: str):
    if name in _FROM_COMMANDS:
        from analysis.cli import commands

        return getattr(commands, name)
    if name == "run_optimize":
        from analysis.cli.optimizecmd import run_optimize

        return run_optimize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "build_parser",
    "claim_run",
    "json_safe",
    "main",
    "make_evaluator",
    "output_dir",
    "parse_grid",
    "positive_int",
    "run_optimize",
    "run_scan",
    "write_json",
]


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--workers``, ``--chunksize``, ``--steps``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def worker_count(text: str) -> int:
    """argparse type of ``--workers``: 1 .. :data:`analysis.limits.MAX_WORKERS`."""
    from analysis.limits import MAX_WORKERS

    value = positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_WORKERS} (docs/guide/limits.md), "
                                         f"got {value}")
    return value


def _add_debug(p: argparse.ArgumentParser) -> None:
    # also after the subcommand; SUPPRESS keeps the main parser's value when absent here
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    _add_debug(p)
    p.add_argument("config", help="YAML analysis config")
    p.add_argument("--output", "-o", help="output directory (default: the config's output.dir)")
    p.add_argument(
        "--executor", choices=["iterative", "futures", "dask", "parsl"],
        help="override executor.type"
    )
    p.add_argument("--workers", type=worker_count, help="override executor.workers")
    p.add_argument("--backend", choices=["auto", "numba", "jax"],
                   help="override engine.backend (auto: numba where it serves the plan)")
    p.add_argument("--chunksize", type=positive_int, help="override executor.chunksize")
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    p.add_argument(
        "--skip-bad-files",
        action="store_true",
        default=None,
        help="go on without unreadable files/chunks (listed in results.json); "
        "default: config's skip_bad_files (false)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="read the files on every pass (default: the config's cache, true: columns "
        "read once and kept for later passes)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="diffcoffea",
        description="Differentiable selections and statistics over NanoAOD with coffea.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"diffcoffea {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("evaluate", help="one pass: statistics and their gradients")
    _add_run_options(p)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a parameter value",
    )

    p = sub.add_parser("optimize", help="optimise the selection parameters")
    _add_run_options(p)
    p.add_argument("--steps", type=positive_int, help="override optimizer.steps")
    p.add_argument(
        "--resume", action="store_true", help="continue from the checkpoint in the output dir"
    )
    p.add_argument(
        "--overwrite", action="store_true", help="start over, deleting an earlier checkpoint"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")

    p = sub.add_parser("scan", help="hard-cut objective on a grid (all points in one pass)")
    _add_run_options(p)
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=LO:HI:N",
        help="grid of one parameter (repeat for more); other parameters stay at init",
    )

    p = sub.add_parser(
        "export",
        help="write workspace.json (pyhf), shapes.root and datacard.txt (Combine) from "
        "an earlier run's results.json",
    )
    _add_debug(p)
    p.add_argument("results_dir", metavar="RESULTS_DIR",
                   help="output directory of 'evaluate' or 'optimize' of a likelihood config")
    p.add_argument("--output", "-o", help="where to write (default: RESULTS_DIR)")
    p.add_argument("--quiet", action="store_true", help="print nothing")

    p = sub.add_parser("make-dataset", help="write NanoAOD-layout demo files")
    _add_debug(p)
    p.add_argument("outdir")
    p.add_argument("--process", choices=["ttbar", "dy"], required=True)
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--files", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return parser


def _version() -> str:
    import analysis

    return analysis.__version__


def _root_cause(err: BaseException) -> DiffcoffeaError | None:
    """A user-facing error, possibly wrapped by coffea's executors."""
    return next((e for e in causes(err) if isinstance(e, DiffcoffeaError)), None)


# command -> (module, function), imported when the command runs
COMMANDS = {
    "evaluate": ("analysis.cli.commands", "cmd_evaluate"),
    "optimize": ("analysis.cli.optimizecmd", "run_optimize"),
    "scan": ("analysis.cli.commands", "run_scan"),
    "make-dataset": ("analysis.cli.commands", "cmd_make_dataset"),
    "export": ("analysis.cli.export", "cmd_export"),
}


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch system's time limit): unwinds as Ctrl-C does, so the
    checkpoint is kept and the output lock released; exit 143."""


def _command(name: str):
    import importlib

    module, function = COMMANDS[name]
    return getattr(importlib.import_module(module), function)


def _on_sigint(signum, frame):
    # The user asked to stop: the executor's teardown (a dask cluster cancelling its
    # tasks, killing workers) is expected, so its warnings would only bury the one line.
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    if _in_native_init(frame):
        _deliver_later(signum)
        return
    if signum == signal.SIGTERM:
        raise Terminated
    raise KeyboardInterrupt


def _in_native_init(frame) -> bool:
    """Whether ``frame`` runs inside a C extension's initialisation (jaxlib's nanobind
    modules build their enums in Python while JAX is imported): an exception raised
    there crosses C++ frames, and the process aborts ("terminate called after throwing
    an instance of 'nanobind::python_error'", a traceback, no exit 130) instead of
    unwinding."""
    while frame is not None:
        if frame.f_code.co_name in ("create_module", "exec_module") and isinstance(
                frame.f_locals.get("self"), importlib.machinery.ExtensionFileLoader):
            return True
        frame = frame.f_back
    return False


def _deliver_later(signum: int) -> None:
    """Send ``signum`` to this process again a moment later, when the main thread is
    back in ordinary code (a timer thread; the handler then raises)."""
    while True:
        timer = threading.Timer(0.01, os.kill, (os.getpid(), signum))
        timer.daemon = True
        try:
            timer.start()
            return
        except KeyboardInterrupt:
            # On a loaded machine the timer can fire before start() returns, where the
            # caller swallows it (a finaliser) or is again not ordinary code. Again.
            continue


_default_unraisablehook = sys.unraisablehook


def _on_unraisable(info) -> None:
    """A Ctrl-C that landed in a finaliser or a gc callback (JAX has one) is swallowed
    by Python ("Exception ignored in ...") and the run would go on to the end; deliver
    it again a moment later, when the main thread is back in ordinary code."""
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        _deliver_later(signal.SIGTERM if issubclass(info.exc_type, Terminated)
                       else signal.SIGINT)
        return
    _default_unraisablehook(info)


def _interrupted(from_command_line: bool, err: BaseException | None = None) -> int:
    """Ctrl-C: one line, exit 130; SIGTERM (:class:`Terminated`): one line, exit 143.
    The checkpoint is intact (it is replaced atomically) and the output lock released
    (the ``with`` blocks have unwound). Called in-process (``main(argv)``), the caller's
    signal handling is left as it was."""
    code, word = (143, "terminated") if isinstance(err, Terminated) else (130, "interrupted")
    if from_command_line:
        with contextlib.suppress(ValueError):  # (not the main thread)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt this
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"diffcoffea: {word}", file=sys.stderr)
    if from_command_line:
        # Skip interpreter teardown: an interrupt inside JAX/XLA initialisation or a
        # compilation can leave state whose atexit/finaliser teardown segfaults.
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    return code


def _wrapped_interrupt(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C inside ``err``'s chain of causes, if any: Python re-raises an exception
    from a class body's ``__set_name__`` as a RuntimeError (pydantic's import, at start-up,
    is one), so a Ctrl-C there arrives as an ordinary error and must still exit 130."""
    return next((e for e in causes(err) if isinstance(e, KeyboardInterrupt)), None)


_default_showwarning = warnings.showwarning
#: JAX's warnings about its persistent compilation cache (jax/_src/compiler.py)
_JAX_CACHE_WARNING = r"Error (reading|writing) persistent compilation cache entry"
#: the line that a pass runs on the JAX reference on the CPU (analysis.pipeline.backend)
_FALLBACK_WARNING = r"the \w+ pass runs on the JAX reference"
#: numba's pedantic IR check on the loop variables of an inlined walk (a cold compile of
#: the demo's kernels printed one, asking the user to report it to numba): the code is
#: right (each kernel is checked against JAX and enumeration); shown with --debug
_NUMBA_SCOPE_WARNING = r"variable '.*' is not in scope"


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Our own warnings as one line (``diffcoffea: warning: ...``); others as Python shows them."""
    if issubclass(category, DiffcoffeaWarning):
        print(f"diffcoffea: warning: {message}", file=sys.stderr)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; ``argv=None`` (the real command line) exits hard on Ctrl-C,
    runs the command's imports without the garbage collector (:func:`analysis.cli.startup.start_up_done`)
    and leaves its objects to the operating system at exit (the interpreter's final
    collections over the whole heap took 2-2.5 s at load 8, 0.4-0.5 s without)."""
    if argv is None:
        # Ctrl-C raises KeyboardInterrupt here (replacing analysis/__init__'s start-up
        # handler, or whatever a library installed while being imported).
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGINT, _on_sigint)
            signal.signal(signal.SIGTERM, _on_sigint)
        sys.unraisablehook = _on_unraisable
    try:  # a Ctrl-C this early is the same one line and exit code as later
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt as err:
        return _interrupted(argv is None, err)
    # --debug (e.g. why a plan runs on the JAX kernel) holds for this call only: main()
    # called again in the same process (a notebook, the tests) must not keep a handler
    # bound to an earlier, possibly closed, stderr, nor the DEBUG level.
    log = logging.getLogger("analysis")  # every module: kernel, driver, backend
    handler, level = None, log.level
    if getattr(args, "debug", False):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("diffcoffea: debug: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
    # a cache miss of a numba kernel: one line before minutes of compiling (--quiet: none)
    notice = None if getattr(args, "quiet", False) else CompileNotice().attach()
    if argv is None and gc.isenabled():
        gc.disable()
        args.gc_paused = True
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            if not getattr(args, "debug", False):
                warnings.filterwarnings("ignore", message=_NUMBA_SCOPE_WARNING)
            if getattr(args, "quiet", False):
                # JAX warns for every program it cannot read from or write to its
                # persistent cache (a full disk: dozens of lines); it compiles them
                # instead, so --quiet prints none of them
                warnings.filterwarnings("ignore", message=_JAX_CACHE_WARNING)
                # and no note that a pass runs on the JAX reference (said at the default
                # level: analysis.pipeline.backend)
                warnings.filterwarnings("ignore", message=_FALLBACK_WARNING)
            # the process's settings and caches (analysis.runtime): a bad variable is
            # one line, as a bad config is
            runtime.configure()
            return _command(args.command)(args)
    except KeyboardInterrupt as err:
        return _interrupted(argv is None, err)
    except ForkAfterJaxError as err:  # a BaseException: no executor wraps it
        if args.debug:
            raise
        print(f"diffcoffea: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        interrupt = _wrapped_interrupt(err)
        if interrupt is not None:
            return _interrupted(argv is None, interrupt)
        cause = _root_cause(err)
        if cause is None or args.debug:
            raise
        print(f"diffcoffea: error: {cause}", file=sys.stderr)
        return 2
    finally:
        if handler is not None:
            log.removeHandler(handler)
            log.setLevel(level)
        if notice is not None:
            notice.detach()
        if argv is None:  # the process ends next: no collection over what it kept
            gc.freeze()
            if getattr(args, "gc_paused", False):
                args.gc_paused = False
                gc.enable()


if __name__ == "__main__":
    sys.exit(main())
