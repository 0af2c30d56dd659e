"""The ``agentx`` command line: a thin layer over the library.

Each command lives in its own module (``agentx.cli.cmd_*``) exposing ``command``; modules are
imported lazily so ``agentx --help`` and light commands start fast. ``AgentxError`` from the
library becomes one ``Error: …`` line and the error's exit code, never a traceback.
"""

from __future__ import annotations

import importlib

import click

from agentx import __version__
from agentx.errors import AgentxError

# (command name, module). Order is the order shown in --help.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("import", "agentx.cli.cmd_import"),
    ("inspect", "agentx.cli.cmd_inspect"),
    ("synth", "agentx.cli.cmd_synth"),
    ("hw", "agentx.cli.cmd_hw"),
    ("models", "agentx.cli.cmd_models"),
    ("plan", "agentx.cli.cmd_plan"),
    ("replay", "agentx.cli.cmd_replay"),
    ("kv-curve", "agentx.cli.cmd_kvcurve"),
    ("sweep", "agentx.cli.cmd_sweep"),
    ("simulate", "agentx.cli.cmd_simulate"),
    ("sql", "agentx.cli.cmd_sql"),
    ("report", "agentx.cli.cmd_report"),
)


class AgentxClickError(click.ClickException):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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
                return importlib.import_module(module).command
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
    cli.main(args=argv, prog_name="agentx")
