"""TOML catalogs → frozen specs, with user files layered over the built-in ones.

A catalog file holds any of three tables, ``[chips.NAME]``, ``[systems.NAME]`` and
``[models.NAME]``, whose keys are the fields of ChipSpec, SystemSpec and ModelSpec (units in
the names). Files are applied in order; an entry replaces the one of the same name, or, with
``base = "other"``, starts from a copy of ``other`` and overrides only the keys it gives.
Every mistake names the file, the table and the key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import tomllib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agentx.catalog.types import WEIGHT_FORMATS, ChipSpec, ModelSpec, SystemSpec
from agentx.errors import CatalogError, UnknownNameError, did_you_mean

KINDS = ("chips", "systems", "models")
BUILTIN_FILES = tuple(f"{kind}.toml" for kind in KINDS)
_SPECS = {"chips": ChipSpec, "systems": SystemSpec, "models": ModelSpec}
# Keys that may be left out: fields only some architectures have default to 0.
_ZERO_DEFAULTS = {
    "models": (
        "kv_lora_rank",
        "qk_rope_head_dim",
        "q_lora_rank",
        "num_local_layers",
        "local_window_tokens",
        "n_routed_experts",
        "experts_per_token",
        "n_shared_experts",
        "moe_intermediate_size",
        "dense_intermediate_size",
    ),
}
_CHOICES = {
    ("models", "attention"): ("gqa", "mla"),
    ("models", "ships_weight_precision"): WEIGHT_FORMATS,
    ("models", "ships_expert_precision"): WEIGHT_FORMATS,
}
_POSITIVE = {
    "chips": ("hbm_bytes", "hbm_bytes_per_s", "bf16_flops_per_s"),
    "systems": ("gpus_per_node", "scale_up_domain_gpus", "scale_up_bytes_per_s"),
    "models": (
        "total_params",
        "active_params",
        "num_layers",
        "hidden_size",
        "vocab_size",
        "num_attention_heads",
        "num_kv_heads",
        "qk_head_dim",
        "v_head_dim",
        "max_context_tokens",
    ),
}


@dataclass(frozen=True)
class Catalog:
    """All known chips, systems and models, by slug (dicts sorted by name)."""

    chips: dict[str, ChipSpec]
    systems: dict[str, SystemSpec]
    models: dict[str, ModelSpec]
    version: str  # sha256[:12] over the bytes of every file read, in order
    files: tuple[str, ...]

    def chip(self, name: str) -> ChipSpec:
        return _get(self.chips, "chip", name)

    def system(self, name: str) -> SystemSpec:
        return _get(self.systems, "hardware", name)

    def model(self, name: str) -> ModelSpec:
        return _get(self.models, "model", name)


def _get(table: dict, kind: str, name: str):
    try:
        return table[name]
    except KeyError:
        lowered = name.strip().lower()
        if lowered in table:
            return table[lowered]
        raise UnknownNameError(kind, name, table) from None


def load_catalog(extra: Iterable[Path | str] = ()) -> Catalog:
    """Built-in catalogs plus the user's files (later files override earlier ones by name)."""
    raw: dict[str, dict[str, tuple[str, dict]]] = {k: {} for k in KINDS}
    digest = hashlib.sha256()
    files: list[str] = []
    pkg = resources.files("agentx.catalog")
    sources = [(name, pkg.joinpath(name).read_bytes()) for name in BUILTIN_FILES]
    for p in extra:
        sources.append((str(p), _read_user_file(Path(p))))
    for label, data in sources:
        digest.update(data)
        files.append(label)
        _merge(raw, label, _parse(label, data))
    chips = {n: _build("chips", n, f, d, {}) for n, (f, d) in sorted(raw["chips"].items())}
    systems = {n: _build("systems", n, f, d, chips) for n, (f, d) in sorted(raw["systems"].items())}
    models = {n: _build("models", n, f, d, {}) for n, (f, d) in sorted(raw["models"].items())}
    return Catalog(chips, systems, models, digest.hexdigest()[:12], tuple(files))


def _read_user_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CatalogError(f"{path}: no such catalog file") from None
    except OSError as err:
        raise CatalogError(f"{path}: cannot read catalog file ({err.strerror})") from None


def _parse(label: str, data: bytes) -> dict:
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise CatalogError(f"{label}: not valid TOML: {err}") from None
    for key, value in doc.items():
        if key not in KINDS:
            raise CatalogError(f"{label}: unknown table [{key}]{did_you_mean(key, KINDS)}")
        if not isinstance(value, dict):
            raise CatalogError(f"{label}: [{key}] must be a table of named entries")
    return doc


def _merge(raw: dict, label: str, doc: dict) -> None:
    for kind, entries in doc.items():
        for name, entry in entries.items():
            where = f"{label}: [{kind}.{name}]"
            if not isinstance(entry, dict):
                raise CatalogError(f"{where}: must be a table of keys")
            nested = [k for k, v in entry.items() if isinstance(v, dict)]
            if nested:
                raise CatalogError(
                    f"{where}: key '{nested[0]}' is a table; a name with a dot must be quoted, "
                    f'e.g. [{kind}."{name}.{nested[0]}"]'
                )
            entry = dict(entry)
            base = entry.pop("base", None)
            if base is not None:
                if base not in raw[kind]:
                    raise CatalogError(
                        f"{where}: key 'base': unknown {kind[:-1]} '{base}'"
                        f"{did_you_mean(str(base), raw[kind])}"
                    )
                entry = {**raw[kind][base][1], **entry}
            raw[kind][name] = (label, entry)


def _build(kind: str, name: str, label: str, entry: dict, chips: dict[str, ChipSpec]):
    cls = _SPECS[kind]
    where = f"{label}: [{kind}.{name}]"
    hints, fields = _schema(cls)
    for key in entry:
        if key not in fields:
            raise CatalogError(f"{where}: unknown key '{key}'{did_you_mean(key, fields)}")
    values: dict = {"name": name}
    for fname, f in fields.items():
        if fname in entry:
            values[fname] = _check(where, kind, fname, entry[fname], hints[fname], chips)
        elif fname in _ZERO_DEFAULTS.get(kind, ()):
            values[fname] = 0
        elif _optional(hints[fname]) and f.default is dataclasses.MISSING:
            values[fname] = None
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise CatalogError(f"{where}: missing key '{fname}'")
    for key in _POSITIVE[kind]:
        if not values[key] > 0:
            raise CatalogError(f"{where}: key '{key}': expected a number > 0, got {values[key]!r}")
    if kind == "models":
        _check_model_shape(where, values)
    return cls(**values)


def _check_model_shape(where: str, v: dict) -> None:
    """Cross-key rules a shape must obey, or derived KV bytes and parameters would be wrong."""
    problems = [
        ("num_dense_layers", v["num_dense_layers"] <= v["num_layers"], "at most num_layers"),
        ("num_local_layers", v["num_local_layers"] <= v["num_layers"], "at most num_layers"),
        (
            "local_window_tokens",
            (v["num_local_layers"] == 0) == (v["local_window_tokens"] == 0),
            "> 0 exactly when num_local_layers > 0",
        ),
        (
            "experts_per_token",
            v["experts_per_token"] <= v["n_routed_experts"],
            "at most n_routed_experts",
        ),
        (
            "moe_intermediate_size",
            v["n_routed_experts"] == 0 or v["moe_intermediate_size"] > 0,
            "> 0 for a model with routed experts",
        ),
        ("kv_lora_rank", v["attention"] != "mla" or v["kv_lora_rank"] > 0, "> 0 for MLA attention"),
    ]
    for key, ok, expected in problems:
        if not ok:
            raise CatalogError(f"{where}: key '{key}': expected {expected}, got {v[key]!r}")


@functools.cache
def _schema(cls) -> tuple[dict, dict]:
    """Resolved type hints and the fields a catalog entry may set (all but ``name``)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "name"}
    return typing.get_type_hints(cls), fields


def _optional(hint) -> bool:
    return isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)


def _check(where: str, kind: str, key: str, value, hint, chips: dict[str, ChipSpec]):
    """One key's value against its field type; the chip of a system is resolved by name."""
    at = f"{where}: key '{key}'"
    if hint is ChipSpec:
        if not isinstance(value, str):
            raise CatalogError(f"{at}: expected a chip name, got {value!r}")
        if value not in chips:
            raise CatalogError(f"{at}: unknown chip '{value}'{did_you_mean(value, chips)}")
        return chips[value]
    base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    want = base[0]
    if want is str:
        if not isinstance(value, str):
            raise CatalogError(f"{at}: expected text, got {value!r}")
        choices = _CHOICES.get((kind, key))
        if choices and value not in choices:
            raise CatalogError(f"{at}: expected one of {', '.join(choices)}, got '{value}'")
        return value
    if want is bool:
        if not isinstance(value, bool):
            raise CatalogError(f"{at}: expected true or false, got {value!r}")
        return value
    if want in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CatalogError(f"{at}: expected a number, got {value!r}")
        if value < 0 or value != value:
            raise CatalogError(f"{at}: expected a number >= 0, got {value!r}")
        if want is int:
            if value != int(value):
                raise CatalogError(f"{at}: expected a whole number, got {value!r}")
            return int(value)
        return float(value)
    return value
