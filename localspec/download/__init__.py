"""Models from the Hugging Face Hub and the HF cache. The only package that imports
huggingface_hub (tests/test_layering.py enforces it): hub.py downloads, cache.py lists and
removes cached GGUFs (merged with the offline store and added paths), refresh.py updates
the catalog (models and drafter files)."""

from __future__ import annotations

from localspec.download.cache import CachedFile, cached_ggufs, local_models, remove_cached
from localspec.download.hub import (
    DISK_MARGIN_BYTES,
    DownloadProgress,
    ProgressCallback,
    RemoteFile,
    check_disk,
    download_model,
    download_quant,
    files_for_quant,
    list_remote_files,
    sha256_file,
)
from localspec.download.refresh import RefreshReport, fetch_gguf_header, refresh_catalog

__all__ = [
    "DISK_MARGIN_BYTES", "CachedFile", "DownloadProgress", "ProgressCallback", "RefreshReport", "RemoteFile",
    "cached_ggufs", "check_disk", "download_model", "download_quant", "fetch_gguf_header", "files_for_quant",
    "list_remote_files", "local_models", "refresh_catalog", "remove_cached", "sha256_file",
]
