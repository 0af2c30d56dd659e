"""Traces: the canonical Parquet format, importers, the synthetic generator, statistics."""

from agentx.traces.io import Trace, read_trace, trace_metadata, write_trace
from agentx.traces.schema import COLUMNS, SCHEMA, SCHEMA_VERSION, validate

__all__ = [
    "COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Trace",
    "read_trace",
    "trace_metadata",
    "validate",
    "write_trace",
]
