"""The model catalog (models/catalog.toml), the drafters it knows per target, and the GGUF
files on this machine.

Layer 1: pure data and the compatibility rule on catalog metadata. Hub access (downloads,
the HF cache, `models refresh`) lives in localspec.download.
"""

from __future__ import annotations

from localspec.catalog.drafters import (
    BLOCK_KINDS,
    KIND_LABELS,
    NOT_RUNNABLE,
    CatalogDrafter,
    DrafterOption,
    drafter_options,
    runnable_model_drafters,
)
from localspec.catalog.local import (
    LocalModel,
    LocalPair,
    add_path,
    added_models,
    added_paths,
    describe,
    drafting_pairs,
    merge_local,
    registry_path,
    remove_path,
    store_models,
)
from localspec.catalog.model import (
    KV_BYTES_PER_ELEMENT,
    SCHEMA,
    Catalog,
    CatalogError,
    CatalogFile,
    CatalogModel,
    Family,
    TokenizerInfo,
    guess_quant,
    load_catalog,
    packaged_catalog_text,
    parse_catalog,
    user_catalog_path,
)
from localspec.catalog.toml_writer import dump_toml, save_user_catalog

__all__ = [
    "BLOCK_KINDS", "KIND_LABELS", "KV_BYTES_PER_ELEMENT", "NOT_RUNNABLE", "SCHEMA", "Catalog", "CatalogDrafter", "CatalogError",
    "CatalogFile", "CatalogModel", "DrafterOption", "Family", "drafter_options", "runnable_model_drafters",
    "LocalModel", "LocalPair", "TokenizerInfo", "add_path", "added_models", "added_paths", "describe",
    "drafting_pairs", "dump_toml", "guess_quant", "load_catalog", "merge_local", "packaged_catalog_text",
    "parse_catalog", "registry_path", "remove_path", "save_user_catalog", "store_models", "user_catalog_path",
]
