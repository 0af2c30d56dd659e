"""Importers: public trace formats in, canonical schema-v1 traces out.

``import_trace(fmt, source, out)`` reads, validates and writes atomically; ``load_<fmt>`` reads
without writing. Each format lives in its own module, imported only when used.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from agentx.errors import InputError, UnknownNameError, UsageError
from agentx.io import check_output
from agentx.traces.io import Trace, write_trace

# format name -> (module, loader function, one-line description for --help)
FORMATS: dict[str, tuple[str, str, str]] = {
    "weka": (
        "agentx.traces.importers.weka",
        "load_weka",
        "folder or file of Weka/AgentX Claude Code sessions (.json, .json.gz)",
    ),
    "mooncake": (
        "agentx.traces.importers.mooncake",
        "load_mooncake",
        "Mooncake JSONL with 512-token hash_ids",
    ),
    "azure": (
        "agentx.traces.importers.azure",
        "load_azure",
        "Azure LLM inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens)",
    ),
    "tracelab": ("agentx.traces.importers.tracelab", "load_tracelab", "TraceLab round_trace JSONL"),
    "claude-code": (
        "agentx.traces.importers.claude_code",
        "load_claude_code",
        "Claude Code session logs (~/.claude/projects: a .jsonl file, a project or all projects)",
    ),
    "codex": (
        "agentx.traces.importers.codex",
        "load_codex",
        "OpenAI Codex CLI rollouts (~/.codex/sessions/**/rollout-*.jsonl)",
    ),
    "otel": (
        "agentx.traces.importers.otel",
        "load_otel",
        "OpenTelemetry GenAI spans as OTLP JSON (resourceSpans envelopes or one span a line)",
    ),
}
# formats that read several files or folders given together
MULTI_SOURCE = ("claude-code", "codex", "otel")


def loader(fmt: str):
    if fmt not in FORMATS:
        raise UnknownNameError("format", fmt, FORMATS)
    module, func, _ = FORMATS[fmt]
    return getattr(importlib.import_module(module), func)


def option_names(fmt: str) -> tuple[str, ...]:
    """Keyword options a format accepts (beyond ``source``)."""
    params = inspect.signature(loader(fmt)).parameters
    return tuple(p for p in params if p != "source")


def load_trace(fmt: str, source: Path | str, **options) -> Trace:
    """Read ``source`` in format ``fmt`` into a validated trace (nothing is written)."""
    load = loader(fmt)
    known = option_names(fmt)
    for name in options:
        if name not in known:
            raise UsageError(
                f"format '{fmt}' takes no option '{name}' (it takes: {', '.join(known)})"
            )
    sources = _sources(fmt, source)
    for src in sources:
        if not Path(src).exists():
            raise InputError(src, "no such file or folder")
    return load(sources if fmt in MULTI_SOURCE else sources[0], **options)


def _sources(fmt: str, source) -> list:
    sources = [source] if isinstance(source, (str, Path)) else list(source)
    if not sources:
        raise UsageError(f"format '{fmt}' needs a file or folder to read")
    if len(sources) > 1 and fmt not in MULTI_SOURCE:
        raise UsageError(
            f"format '{fmt}' reads one file or folder, got {len(sources)} "
            f"(several are read by: {', '.join(MULTI_SOURCE)})"
        )
    return sources


def import_trace(fmt: str, source: Path | str, out: Path | str, **options) -> Trace:
    """Import ``source`` and write the trace to ``out`` atomically; returns the trace."""
    loader(fmt)
    sources = _sources(fmt, source)
    check_output(out, sources)
    trace = load_trace(fmt, source, **options)
    write_trace(trace, out, inputs=sources)
    return trace


def load_weka(source: Path | str, **options) -> Trace:
    return load_trace("weka", source, **options)


def load_mooncake(source: Path | str, **options) -> Trace:
    return load_trace("mooncake", source, **options)


def load_azure(source: Path | str, **options) -> Trace:
    return load_trace("azure", source, **options)


def load_tracelab(source: Path | str, **options) -> Trace:
    return load_trace("tracelab", source, **options)
