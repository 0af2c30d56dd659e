"""Chips, systems and models as data: TOML catalogs loaded into frozen specs.

``load_catalog()`` returns the built-in catalogs; ``load_catalog(extra=[Path("my.toml")])``
layers the user's files on top (``--catalog`` on the command line). Names are lowercase slugs
(``gb200``, ``deepseek-v3``); an unknown one raises UnknownNameError with a suggestion.
"""

from agentx.catalog.loader import Catalog, load_catalog
from agentx.catalog.types import ChipSpec, ModelSpec, ServingConfig, SystemSpec

__all__ = ["Catalog", "ChipSpec", "ModelSpec", "ServingConfig", "SystemSpec", "load_catalog"]
