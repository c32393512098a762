"""Where localspec keeps its files (platformdirs), and where its packaged data lives.

platformdirs is imported only when a folder is not overridden by its `LOCALSPEC_*_DIR`
variable, so the kernels run (and their tests) on a machine without it (the GPU check).
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

APP_NAME = "localspec"


def data_dir() -> Path:
    """User data dir (models store lives here). `LOCALSPEC_DATA_DIR` overrides it."""
    override = os.environ.get("LOCALSPEC_DATA_DIR")
    if override:
        return Path(override)
    from platformdirs import user_data_path

    return user_data_path(APP_NAME)


def cache_dir() -> Path:
    """User cache dir (built kernels, downloaded packages). `LOCALSPEC_CACHE_DIR` overrides it."""
    override = os.environ.get("LOCALSPEC_CACHE_DIR")
    if override:
        return Path(override)
    from platformdirs import user_cache_path

    return user_cache_path(APP_NAME)


def config_dir() -> Path:
    """User config dir. `LOCALSPEC_CONFIG_DIR` overrides it."""
    override = os.environ.get("LOCALSPEC_CONFIG_DIR")
    if override:
        return Path(override)
    from platformdirs import user_config_path

    return user_config_path(APP_NAME)


def model_store_dir() -> Path:
    """Directory with GGUF files assembled or added by localspec (not the HF cache)."""
    return data_dir() / "models"


def packaged(*parts: str) -> Traversable:
    """A file packaged with the app: `packaged("models", "catalog.toml")`, `packaged("cuda", ...)`.

    The wheel carries the top-level `cuda/` and `models/` folders as `localspec/_data/`;
    in a source checkout `localspec/_data/*` are symlinks to them.
    """
    node: Traversable = resources.files("localspec") / "_data"
    for part in parts:
        node = node / part
    return node
