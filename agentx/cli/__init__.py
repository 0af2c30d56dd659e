"""The ``agentx`` command line: a thin layer over the library.

Each command lives in its own module (``agentx.cli.cmd_*``) exposing ``command``; modules are
imported lazily so ``agentx --help`` and light commands start fast. ``AgentxError`` from the
library becomes one ``Error: …`` line and the error's exit code, never a traceback.
"""

from __future__ import annotations

import errno
import gc
import importlib
import math
import os
import sys

import click

from agentx import __version__
from agentx.errors import AgentxError, one_line

# polars' allocator (jemalloc) keeps freed pages for 0.5-1 s by default, so columns a command
# drops (the trace's KV-only columns after the KV pass, a read's decode buffers) stayed in the
# peak RSS while numpy (another allocator) asked the OS for more: 0.66 GB of a 10 M-call
# replay. Giving them back at once (decay 0) cost page faults instead: a read decodes, checks
# and concatenates into fresh pages the kernel must zero again (0.9 M faults, ~1.5 CPU s of
# system time at 10 M calls). 100 ms, purged by jemalloc's background thread, reuses pages
# within a burst and keeps the same peak (10 M calls, four alternating runs each: system time
# 3.3-3.8 s instead of 3.6-5.0 s, peak RSS 1.943 M KiB, 1.99 GB, both). Set before polars is first
# imported, which puts its own default first (so ours, later, wins); a user's own setting
# comes last and wins. polars' default inherited from a parent process that imported polars
# is not a user's setting.
_JEMALLOC_POLARS = "dirty_decay_ms:500,muzzy_decay_ms:1000"
_JEMALLOC_OURS = "dirty_decay_ms:100,muzzy_decay_ms:0,background_thread:true"
_user = os.environ.get("_RJEM_MALLOC_CONF", "").removeprefix(_JEMALLOC_POLARS).lstrip(",")
os.environ["_RJEM_MALLOC_CONF"] = ",".join(filter(None, (_JEMALLOC_OURS, _user)))
# numpy's OpenBLAS starts a thread per core when numpy is imported, and each spins for a while
# before it sleeps: 0.1 CPU s of a 2-core machine's other core at every start (import numpy:
# 0.21 against 0.11 CPU s with one thread, three runs each). No command multiplies matrices
# on a hot path (calibrate's one least-squares fit is a few dozen rows). A user's own setting
# wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# numpy asks for transparent huge pages on every array of 4 MB or more (madvise), and a huge
# page is zeroed and backed 2 MB at once when first touched. On the 2-core VMs this project is
# measured on (defrag "madvise": direct compaction on such a fault; the hypervisor takes freed
# guest memory back, so first touches are the host's to back) that cost 1.2-1.7 s of system
# time per 720 MB against 0.25 s with 4 KB pages (nine fresh 80 MB arrays filled, three runs
# each). A 10 M-call replay with 4 KB pages: median 6.35 against 6.97 s, system time 2.6-3.0
# against 3.0-5.0 s, user time 0.2-0.4 s more (six alternating runs each, byte-identical);
# the chain kernel's random accesses lose nothing measurable (1.38-1.53 s either way). On a
# bare-metal host with free huge pages the trade can go the other way: a user's own setting
# (NUMPY_MADVISE_HUGEPAGE=1) wins. The out-of-core replay turns them back on (recycled_pages).
_USER_HUGEPAGE = "NUMPY_MADVISE_HUGEPAGE" in os.environ
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")


def recycled_pages() -> None:
    """numpy back on transparent huge pages (unless the user chose): for a command whose memory
    is the same few partitions' worth, freed and taken again, not first touches. There a huge
    page means 512 times fewer faults on pages the host still backs: the out-of-core replay of
    10 M calls took 17.2-17.4 s with them against 18.3-20.4 s without (two alternating runs
    each). numpy's switch is private; where it is missing, nothing changes."""
    if _USER_HUGEPAGE:
        return
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover (numpy < 2 or a later rename)
        return
    _set_madvise_hugepage(True)


# An unexpected exception is a bug in agentx, not the user's fault: it still prints one line
# (and exits 70, EX_SOFTWARE); AGENTX_DEBUG=1 shows the traceback for a bug report.
EXIT_BUG = 70

# (command name, module). Order is the order shown in --help.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("import", "agentx.cli.cmd_import"),
    ("export", "agentx.cli.cmd_export"),
    ("inspect", "agentx.cli.cmd_inspect"),
    ("synth", "agentx.cli.cmd_synth"),
    ("hw", "agentx.cli.cmd_hw"),
    ("models", "agentx.cli.cmd_models"),
    ("plan", "agentx.cli.cmd_plan"),
    ("replay", "agentx.cli.cmd_replay"),
    ("partition", "agentx.cli.cmd_partition"),
    ("kv-curve", "agentx.cli.cmd_kvcurve"),
    ("sweep", "agentx.cli.cmd_sweep"),
    ("simulate", "agentx.cli.cmd_simulate"),
    ("compare", "agentx.cli.cmd_compare"),
    ("sql", "agentx.cli.cmd_sql"),
    ("report", "agentx.cli.cmd_report"),
    ("validate", "agentx.cli.cmd_validate"),
    ("calibrate", "agentx.cli.cmd_calibrate"),
)


class AgentxClickError(click.ClickException):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class FiniteFloat(click.types.FloatParamType):
    """A float option that refuses NaN and ±inf (+inf allowed where it is the default: no limit)."""

    def __init__(self, allow_inf: bool = False) -> None:
        self.allow_inf = allow_inf

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if math.isnan(v) or (math.isinf(v) and not (self.allow_inf and v > 0)):
            what = "a number or inf" if self.allow_inf else "a finite number"
            self.fail(f"expected {what}, got {value!r}", param, ctx)
        return v


class Int64(click.types.IntParamType):
    """An integer option that fits in 64 bits (numpy and Parquet hold nothing wider)."""

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if not -(1 << 63) <= v < (1 << 63):
            self.fail(f"expected an integer that fits in 64 bits, got {value!r}", param, ctx)
        return v


class NonEmptyPath(click.Path):
    """A path option or argument that refuses '' (click would read it as '.', the cwd)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip() == "":
            self.fail("expected a path, got an empty string", param, ctx)
        return super().convert(value, param, ctx)


def _guard_numbers(command: click.Command) -> click.Command:
    # One place for every command, those added later included: plain float and int options
    # get the finite / 64-bit checks (a command's own range checks follow).
    for p in command.params:
        if type(p.type) is click.types.FloatParamType:
            unbounded = isinstance(p.default, float) and math.isinf(p.default)
            p.type = FiniteFloat(allow_inf=unbounded)
        elif type(p.type) is click.types.IntParamType:
            p.type = Int64()
        elif type(p.type) is click.Path:
            p.type.__class__ = NonEmptyPath
    for sub in getattr(command, "commands", {}).values():  # groups such as `agentx hw`
        _guard_numbers(sub)
    return command


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, _ in COMMANDS]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from each command's docstring, read without importing its module
        (importing them all pulls polars, pyarrow and numba: ``agentx --help`` stays fast)."""
        width = formatter.width - 6 - max(len(name) for name, _ in COMMANDS)
        rows = [(name, _short_help(module, width)) for name, module in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for name, module in COMMANDS:
            if name == cmd_name:
                return _guard_numbers(importlib.import_module(module).command)
        return None

    def resolve_command(self, ctx, args):
        name = args[0] if args else None
        if name is not None and self.get_command(ctx, name) is None and not name.startswith("-"):
            from agentx.errors import did_you_mean

            ctx.fail(f"no such command '{name}'{did_you_mean(name, self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AgentxError as err:
            raise AgentxClickError(str(err), err.exit_code) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except MemoryError:
            raise AgentxClickError(
                "out of memory; give a smaller trace or raise the machine's memory", 1
            ) from None
        except RecursionError:
            raise AgentxClickError("input nested too deeply to read", 1) from None
        except OSError as err:
            if err.errno == errno.EPIPE:  # `agentx … | head`: the reader left, nothing to say
                raise click.exceptions.Exit(0) from None
            where = f"{one_line(err.filename)}: " if err.filename else ""
            raise AgentxClickError(f"{where}{err.strerror or err}", 1) from None
        except BaseException as err:  # a Rust panic (pyo3) is a BaseException, not an Exception
            if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            if os.environ.get("AGENTX_DEBUG"):
                raise
            raise AgentxClickError(
                f"internal error, a bug in agentx: {type(err).__name__}: {one_line(err)} "
                "(AGENTX_DEBUG=1 shows the traceback; please report it)",
                EXIT_BUG,
            ) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Every error is one line on stderr: ``Error: …`` (click's usage errors included)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as err:
            click.echo(f"Error: {one_line(err.format_message())}", err=True)
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def _short_help(module: str, limit: int) -> str:
    import ast
    import importlib.util

    origin = importlib.util.find_spec(module).origin
    with open(origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "command":
            doc = ast.get_docstring(node)
            for dec in node.decorator_list:  # help= given to click.command wins
                if getattr(getattr(dec, "func", None), "attr", None) != "command":
                    continue
                for kw in dec.keywords:
                    if kw.arg == "help" and isinstance(kw.value, ast.Constant | ast.JoinedStr):
                        parts = (
                            [kw.value] if isinstance(kw.value, ast.Constant) else kw.value.values
                        )
                        doc = "".join(p.value for p in parts if isinstance(p, ast.Constant))
            if doc is not None:
                return click.Command(module, help=doc).get_short_help_str(limit)
    return importlib.import_module(module).command.get_short_help_str(limit)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Example: agentx import weka ../shared/traces/weka-claude-code -o w.parquet && agentx replay w.parquet --hw gb200",
)
@click.version_option(__version__, prog_name="agentx")
def cli() -> None:
    """What agent traffic costs on an accelerator system, stage by stage, and where its KV cache lives.

    Exit codes: 0 success, 1 bad input (a file, a row, a field), 2 usage error.
    """


def main(argv: list[str] | None = None) -> None:
    # A command imports polars, numba and their catalogs (about a million long-lived objects),
    # and the default cyclic-GC cadence (a pass every 700 allocations, full passes over all of
    # them) then costs ~7 % of a 3 s command (perf: gc_collect_main). Cycles are still
    # collected, just in larger steps.
    gc.set_threshold(100_000, 50, 100)
    if argv is None:  # the process's own command: a first run may interpret its kernels
        from agentx import warm

        warm.OWN_PROCESS = True
    try:
        cli.main(args=argv, prog_name="agentx")
    except SystemExit as done:
        if argv is None and done.code in (0, None):
            _exit_now()
        raise
    finally:
        if argv is None:  # the process's own command (not a caller's): the process ends next
            # and the interpreter's last full collection would walk those objects again,
            # finding no garbage among modules that live to the end (10 M-call replay: its
            # shutdown 0.09-0.11 s instead of 0.21-0.44 s, three alternating runs each)
            gc.freeze()


def _exit_now() -> None:
    """End the process of a command that succeeded without tearing the interpreter down.

    The command's files are written and closed (atomically) by now. What an interpreter's
    exit would still do that matters is done here, in its order: non-daemon threads joined
    (``threading._shutdown``), then the exit handlers (a kernel helper stopped, agentx.warm;
    Ray shut down), then stdout and stderr flushed. What is skipped is freeing every object one
    by one: numba's compiled modules, polars' and numpy's buffers (0.4-0.9 s after a 10 M-call
    replay, ~0.5 s after a 1 M-call kv-curve, of which ~0.4 CPU s; the kernel takes the
    memory back at once). Where either private hook is missing, or a flush fails, the normal
    exit runs instead."""
    import atexit
    import threading

    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 (the normal exit, then)
        return
    os._exit(0)
