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


def _leaves():
    for cmd_name, module in COMMANDS:
        yield from _walk(importlib.import_module(module).command, cmd_name)


def _options(cmd: click.Command):
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def test_every_command_has_json():
    """Every command prints a table or a summary; each has --json (issue 13 item 5)."""
    missing = [
        name for name, cmd in _leaves() if not any("--json" in p.opts for p in _options(cmd))
    ]
    assert not missing, "commands without --json: " + ", ".join(missing)


def test_hw_never_defaults():
    """--hw is required wherever a command prices on one system and never silently defaulted
    (where it is optional it selects: plan's footprint mode, sweep's override of a scenario,
    calibrate's filter)."""
    defaulted = [
        f"agentx {name} --hw (default {p.default!r})"
        for name, cmd in _leaves()
        for p in _options(cmd)
        if "--hw" in p.opts and p.default not in (None, (), click.core.UNSET)
    ]
    assert not defaulted, defaulted


# An option whose name carries a quantity must name its unit in the help text.
_TIME = r"\b(s|ms|seconds?|milliseconds?|minutes?|hours?)\b"
_QUANTITY_UNITS = (
    # (what, option-name pattern, unit pattern the help must contain)
    ("price", r"usd|price|cost", r"\$|USD"),
    ("rate", r"rate|qps|interactivity", r"/s\b|per s(econd)?\b"),
    ("bandwidth", r"bandwidth|-bw\b", r"\b[KMGT]?B/s\b"),
    ("bytes", r"bytes|-[kmgt]i?b\b|capacit|memory", r"\b(B|bytes?|[KMGT]i?B)\b"),
    ("tokens", r"tokens|context|-isl\b|-osl\b|chunk(?!-rows)", r"\b[Tt]okens?\b"),
    ("time", r"-m?s\b|time|wait|latency|duration|timeout|horizon", _TIME),
    ("power", r"power|watts|-w\b", r"\bW\b|watts?"),
)


def unitless(name: str, help_text: str) -> list[str]:
    """The quantities ``name`` carries whose unit ``help_text`` does not name."""
    import re

    return [
        what
        for what, pat, unit in _QUANTITY_UNITS
        if re.search(pat, name) and not re.search(unit, help_text or "")
    ]


def test_unit_check_can_fail():
    assert unitless("--max-wait-s", "Drop calls that wait longer than this.") == ["time"]
    assert unitless("--max-wait-s", "Drop calls that wait longer than this many s.") == []
    assert unitless("--hbm-kv-gb", "HBM for KV in the whole instance.") == ["bytes"]
    assert unitless("--isl", "nominal input length") == ["tokens"]
    assert unitless("--usd-per-gpu-hour", "Price per GPU-hour.") == ["price"]
    assert unitless("--rate-per-s", "sessions per second") == []
    assert unitless("--pp", "Pipeline stages.") == []
    assert unitless("--chunk-tokens", "Prefill chunk.") == ["tokens"]
    assert unitless("--chunk-rows", "Calls per partition.") == []  # rows of calls, not tokens


def test_help_texts_show_units():
    missing = [
        f"agentx {name} {'/'.join(p.opts)}: {', '.join(what)}"
        for name, cmd in _leaves()
        for p in _options(cmd)
        for what in [unitless(max(p.opts, key=len), p.help)]
        if what
    ]
    assert not missing, "help text without its unit: " + "; ".join(missing)
