"""Every option of every command says what it does (one definition, shown by --help)."""

from __future__ import annotations

import importlib

import click

from agentx.cli import COMMANDS


def _walk(cmd: click.Command, name: str):
    if isinstance(cmd, click.Group):
        for sub_name, sub in cmd.commands.items():
            yield from _walk(sub, f"{name} {sub_name}")
    else:
        yield name, cmd


def test_every_option_has_help():
    missing = [
        f"agentx {name} {'/'.join(p.opts)}"
        for cmd_name, module in COMMANDS
        for name, cmd in _walk(importlib.import_module(module).command, cmd_name)
        for p in cmd.params
        if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()
    ]
    assert not missing, "options without help: " + ", ".join(missing)
