"""`localspec models refresh`: replace the catalog's unverified figures with the Hub's.

For every catalog repo: the file list, sizes and LFS sha256 (new quantizations are added), and
the same for the GGUF files of `[[drafter]]` records (MTP heads);
with `headers=True` also the first MiBs of one GGUF per model (HTTP Range), whose header gives
the architecture figures and the tokenizer fingerprint. The result is written as the user
copy of the catalog, which overrides the packaged one. Each figure's `source` says
"hub <date>" or "hub header <date>".
"""

from __future__ import annotations

import copy
import datetime
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import hf_hub_url
from huggingface_hub import get_session

from localspec.catalog import Catalog, guess_quant, parse_catalog, save_user_catalog
from localspec.download.hub import RemoteFile, _endpoint, _translate, list_remote_files
from localspec.errors import DownloadError, LocalSpecError

log = logging.getLogger(__name__)


@dataclass
class RefreshReport:
    """What a refresh changed."""

    repos_checked: int = 0
    files_updated: int = 0
    files_added: int = 0
    files_missing: list[str] = field(default_factory=list)
    headers_read: int = 0
    errors: list[str] = field(default_factory=list)
    path: Path | None = None


def apply_listing(raw: dict[str, Any], repo_id: str, files: list[RemoteFile], stamp: str, report: RefreshReport) -> None:
    """Update every catalog file of `repo_id` from its Hub listing, add unknown single-file
    GGUF quantizations to the model that owns the repo."""
    by_path = {f.path: f for f in files}
    for model in raw["model"]:
        if model["repo"] != repo_id and not any(f.get("repo") == repo_id for f in model["files"]):
            continue
        known = {f["file"] for f in model["files"]}
        for entry in model["files"]:
            if entry.get("repo", model["repo"]) != repo_id:
                continue
            remote = by_path.get(entry["file"])
            if remote is None:
                if "missing" not in entry["source"]:
                    entry["source"] = f"missing on hub {stamp} (was {entry['source']})"
                report.files_missing.append(f"{repo_id}/{entry['file']}")
                continue
            entry["size"] = remote.size
            entry["sha256"] = remote.sha256 or ""
            entry["source"] = f"hub {stamp}"
            report.files_updated += 1
        if model["repo"] != repo_id:
            continue
        for f in files:
            quant = guess_quant(f.path)
            low = f.path.lower()
            if (f.path in known or not low.endswith(".gguf") or quant is None or "mmproj" in low
                    or "-of-0" in low or "/" in f.path):
                continue
            model["files"].append({"quant": quant, "file": f.path, "size": f.size,
                                   "sha256": f.sha256 or "", "source": f"hub {stamp}"})
            report.files_added += 1


def apply_drafter_listing(raw: dict[str, Any], repo_id: str, files: list[RemoteFile], stamp: str,
                          report: RefreshReport) -> None:
    """Update the size and sha256 of every `[[drafter]]` GGUF file in `repo_id` from its listing."""
    by_path = {f.path: f for f in files}
    for d in raw.get("drafter", ()):
        if d.get("repo") != repo_id or not d.get("file"):
            continue
        remote = by_path.get(d["file"])
        if remote is None:
            report.files_missing.append(f"{repo_id}/{d['file']}")
            continue
        d["size"] = remote.size
        d["sha256"] = remote.sha256 or ""
        d["file_source"] = f"hub {stamp}"
        report.files_updated += 1


def fetch_gguf_header(repo_id: str, filename: str, *, revision: str | None = None, endpoint: str | None = None,
                      token: str | bool | None = None, max_bytes: int = 64 << 20) -> Path:
    """The first bytes of a remote GGUF (HTTP Range), enough for gguf_info to read the header
    (tokens, architecture) without the weights. Returns a temp file the caller deletes."""
    from localspec.gguf_info import read_metadata

    ep = _endpoint(endpoint)
    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=ep)
    headers = {"Authorization": f"Bearer {token}"} if isinstance(token, str) else {}
    want = 8 << 20
    fd, tmp_name = tempfile.mkstemp(suffix=".gguf-header")
    os.close(fd)
    tmp = Path(tmp_name)
    while True:
        try:
            r = get_session().get(url, headers={**headers, "Range": f"bytes=0-{want - 1}"}, follow_redirects=True)
            r.raise_for_status()
        except (httpx2.HTTPError, OSError) as exc:
            tmp.unlink(missing_ok=True)
            raise _translate(exc, repo_id, filename, ep) from exc
        tmp.write_bytes(r.content)
        try:
            read_metadata(tmp)
            return tmp
        except LocalSpecError:
            if want >= max_bytes or len(r.content) < want:
                tmp.unlink(missing_ok=True)
                raise DownloadError(
                    f"could not read the GGUF header of {repo_id}/{filename} from its first {want >> 20} MiB"
                ) from None
            want *= 2


def apply_header(raw: dict[str, Any], model_id: str, header_path: Path, stamp: str) -> None:
    """Architecture and tokenizer facts of one model from a real GGUF header.

    An unknown tokenizer fingerprint is filled in; if the header contradicts the tokenizer
    the catalog names, the model gets its own tokenizer record, so the compatibility rule
    sees the truth."""
    from localspec.gguf_info import read_metadata, vocab_info

    meta = read_metadata(header_path)
    info = vocab_info(header_path, use_cache=False)
    model = next(m for m in raw["model"] if m["id"] == model_id)
    arch = meta.get("general.architecture", "")

    def get(key: str) -> Any:
        return meta.get(f"{arch}.{key}")

    n_head = get("attention.head_count")
    if isinstance(n_head, list):  # per-layer head counts: take the first
        n_head = n_head[0]
    n_kv = get("attention.head_count_kv")
    if isinstance(n_kv, list):
        n_kv = max(n_kv)
    updates = {
        "n_layer": get("block_count"), "n_embd": get("embedding_length"), "n_head": n_head,
        "n_head_kv": n_kv, "n_ctx_train": get("context_length"),
        "head_dim": get("attention.key_length") or (get("embedding_length") // n_head if n_head else None),
        "sliding_window": get("attention.sliding_window"),
    }
    for k, v in updates.items():
        if isinstance(v, int) and v > 0:
            model[k] = v
    model["n_vocab"] = info.n_vocab
    model["source"] = f"hub header {stamp}"
    family = next(f for f in raw["family"] if f["id"] == model["family"])
    tok_id = model.get("tokenizer", family["tokenizer"])
    tok = raw["tokenizer"][tok_id]
    record = {
        "model": info.tokenizer_model, "pre": info.tokenizer_pre, "n_vocab": info.n_vocab,
        "bos": info.bos_token_id, "eos": info.eos_token_id, "eog": sorted(info.eog_token_ids),
        "fingerprint": info.fingerprint, "source": f"hub header {stamp}",
    }
    record = {k: v for k, v in record.items() if v is not None}
    same = (not tok.get("fingerprint") or tok["fingerprint"] == info.fingerprint) and all(
        tok.get(k) == record.get(k) for k in ("model", "bos", "eos")
    )
    if same and not tok.get("fingerprint"):
        tok.update(record)
        tok["note"] = f"{tok.get('note', '')} (filled from the {model_id} header)".strip()
    elif not same:
        own = f"{tok_id}@{model_id}"
        raw["tokenizer"][own] = {**record, "note": f"header of {model_id} differs from tokenizer {tok_id!r}"}
        model["tokenizer"] = own
        log.warning("%s: header tokenizer differs from the catalog's %r; gave it its own record", model_id, tok_id)


def refresh_catalog(
    catalog: Catalog,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    model_ids: list[str] | None = None,
    headers: bool = False,
    save: bool = True,
    on_repo: Callable[[str], None] | None = None,
) -> RefreshReport:
    """Refresh `catalog` from the Hub and (by default) save it as the user copy."""
    stamp = datetime.date.today().isoformat()
    raw = copy.deepcopy(catalog.raw)
    report = RefreshReport()
    wanted = [m for m in catalog.models if not model_ids or m.id in model_ids]
    wanted_ids = {m.id for m in wanted}
    drafter_repos = {d.repo for d in catalog.drafters if d.file and wanted_ids.intersection(d.targets)}
    repos = sorted({m.repo for m in wanted} | {f.repo for m in wanted for f in m.files if f.repo} | drafter_repos)
    listings: dict[str, list[RemoteFile]] = {}
    for repo in repos:
        if on_repo:
            on_repo(repo)
        try:
            listings[repo] = list_remote_files(repo, endpoint=endpoint, token=token)
        except LocalSpecError as exc:
            report.errors.append(f"{repo}: {exc}")
            continue
        report.repos_checked += 1
        apply_listing(raw, repo, listings[repo], stamp, report)
        if repo in drafter_repos:
            apply_drafter_listing(raw, repo, listings[repo], stamp, report)
    if headers:
        for m in wanted:
            remote = [f for f in listings.get(m.repo, []) if f.path in {x.file for x in m.files}]
            if not remote:
                continue
            smallest = min(remote, key=lambda f: f.size)
            try:
                tmp = fetch_gguf_header(m.repo, smallest.path, endpoint=endpoint, token=token)
            except LocalSpecError as exc:
                report.errors.append(f"{m.repo}/{smallest.path} header: {exc}")
                continue
            try:
                apply_header(raw, m.id, tmp, stamp)
                report.headers_read += 1
            except LocalSpecError as exc:
                report.errors.append(f"{m.repo}/{smallest.path} header: {exc}")
            finally:
                tmp.unlink(missing_ok=True)
    raw["updated"] = stamp
    parse_catalog(raw, "refresh")
    if save:
        report.path = save_user_catalog(raw)
    return report
