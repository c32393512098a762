"""Download rows: one progress bar per file, each download in its own thread worker with
a cancel Event (set on cancel and on quit; localspec.download leaves nothing partial)."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, cast

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalGroup
from textual.widgets import Button, Label, ProgressBar

from localspec.errors import DownloadCancelledError, LocalSpecError
from localspec.tui.messages import DownloadFailed, DownloadFinished, DownloadProgressed

if TYPE_CHECKING:
    from localspec.tui.app import LocalSpecApp

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.1


class DownloadRow(Horizontal):
    """One file being downloaded: name, bar, cancel button."""

    def __init__(self, key: str, filename: str, total: int) -> None:
        super().__init__(classes="download-row", id=f"download-{abs(hash(key)) % 10**12}")
        self.key = key
        self.filename = filename
        self.total = total
        self.cancel_event = threading.Event()
        """Set to stop the download (the worker notices within one chunk)."""

    def compose(self) -> ComposeResult:
        yield Label(self.filename, classes="download-row--name")
        yield ProgressBar(total=self.total or None, show_eta=False)
        yield Button("✗", classes="download-row--cancel", compact=True)

    @on(Button.Pressed, ".download-row--cancel")
    def cancel(self) -> None:
        """Cancel this download."""
        self.cancel_event.set()


class DownloadList(VerticalGroup):
    """The running and finished downloads of the models screen."""

    def start(self, repo: str, filename: str, size: int) -> None:
        """Download `filename` from `repo` with a progress bar."""
        key = f"{repo}/{filename}"
        for row in self.query(DownloadRow):
            if row.key == key and not row.has_class("-done"):
                self.notify(f"{filename} is already downloading.")
                return
        row = DownloadRow(key, filename, size)
        self.mount(row)
        cast("LocalSpecApp", self.app).download_cancels.append(row.cancel_event)  # set on quit
        self.run_download(row, repo, filename)

    def cancel_all(self) -> None:
        """Cancel every running download."""
        for row in self.query(DownloadRow):
            row.cancel_event.set()

    @work(thread=True, group="download", exit_on_error=False)
    def run_download(self, row: DownloadRow, repo: str, filename: str) -> None:
        """Run one download; progress arrives as DownloadProgressed messages."""
        from localspec.download import DownloadProgress, download_model

        settings = cast("LocalSpecApp", self.app).settings
        last = [0.0]

        def progress(event: DownloadProgress) -> None:
            now = time.monotonic()
            if event.phase == "download" and now - last[0] < PROGRESS_EVERY_S:
                return  # the bar needs a few updates a second, not one per chunk
            last[0] = now
            self.post_message(DownloadProgressed(row.key, event.phase, event.bytes_done, event.bytes_total or 0))

        try:
            path = download_model(
                repo, filename, progress=progress, cancel=row.cancel_event,
                endpoint=settings.hub_endpoint, cache_dir=settings.hf_cache_dir,
            )
        except DownloadCancelledError as exc:
            self.post_message(DownloadFailed(row.key, str(exc), cancelled=True))
            return
        except LocalSpecError as exc:
            self.post_message(DownloadFailed(row.key, str(exc)))
            return
        except Exception as exc:  # keep the app alive; show what broke
            log.exception("download failed")
            self.post_message(DownloadFailed(row.key, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(DownloadFinished(row.key, str(path)))

    def _row(self, key: str) -> DownloadRow | None:
        return next((r for r in self.query(DownloadRow) if r.key == key), None)

    @on(DownloadProgressed)
    def advance_bar(self, message: DownloadProgressed) -> None:
        """Move the file's bar."""
        row = self._row(message.key)
        if row is not None:
            row.query_one(ProgressBar).update(total=message.total or None, progress=message.done)
            if message.phase == "verify":
                row.query_one(Label).update(f"verifying {row.filename}")

    @on(DownloadFinished)
    def mark_done(self, message: DownloadFinished) -> None:
        """Mark the row done."""
        row = self._row(message.key)
        if row is not None:
            row.add_class("-done")
            row.query_one(Label).update(f"✓ {row.filename}")
            row.query_one(Button).display = False

    @on(DownloadFailed)
    def mark_failed(self, message: DownloadFailed) -> None:
        """Show the failure in the row (it stays until the next download of that file)."""
        row = self._row(message.key)
        if row is not None:
            row.add_class("-done")
            row.add_class("-error")
            row.query_one(Label).update(("cancelled: " if message.cancelled else "✗ ") + row.filename)
            row.query_one(Button).display = False
            row.tooltip = message.error
