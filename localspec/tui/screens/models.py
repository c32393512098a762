"""The models screen: local GGUFs and catalog entries that fit this machine (or a GPU named
in the "plan for a GPU" field), drafters compatible with the chosen target (and, greyed out,
those localspec cannot run yet: MTP, EAGLE-3, DFlash, DSpark), quant/context/GPU layers,
download and load.

Everything that reads files or the network runs in thread workers; errors (missing file,
incompatible pair, failed download) are shown in place and the screen stays usable."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from localspec.errors import LocalSpecError
from localspec.tui import choices
from localspec.catalog.drafters import NOT_RUNNABLE
from localspec.tui.choices import CatalogChoice, DrafterChoice, LocalModel
from localspec.tui.messages import DownloadFailed, DownloadFinished
from localspec.tui.widgets.downloads import DownloadList
from localspec.types import ModelSpec

if TYPE_CHECKING:
    from localspec.catalog import Catalog, DrafterOption
    from localspec.gpus import GpuSpec
    from localspec.tui.app import LocalSpecApp

log = logging.getLogger(__name__)

NO_DRAFTER = "none"


@dataclass(frozen=True)
class TargetEntry:
    """One row of the target list: a local file or a catalog model."""

    local: LocalModel | None = None
    catalog: CatalogChoice | None = None


class ModelsScreen(Screen[None]):
    """Choose, download and load a target/drafter pair."""

    BINDINGS = [
        Binding("ctrl+l", "load_pair", "Load pair"),
        Binding("ctrl+d", "download", "Download"),
        Binding("ctrl+x", "cancel_downloads", "Cancel downloads", show=False),
        Binding("ctrl+r", "rescan", "Rescan"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.local: list[LocalModel] = []
        self.catalog: Catalog | None = None
        self.catalog_entries: list[CatalogChoice] = []
        self.targets: dict[str, TargetEntry] = {}
        """Option id -> entry of the target list."""
        self.drafters: dict[str, str] = {}
        """Option id -> drafter path (or catalog id with a "cat:" prefix)."""
        self.drafters_for: TargetEntry | None = None
        """The target the drafter list was made for."""
        self.added: list[str] = []
        """GGUF paths added on this screen or given at start (`TuiSettings.added_paths`)."""
        self.plan: GpuSpec | None = None
        """A GPU named in the plan field: the catalog is fitted to it instead of this machine."""

    @property
    def lsapp(self) -> LocalSpecApp:
        """The app, typed."""
        return cast("LocalSpecApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static("Models — choose a target, then a drafter; Ctrl+L loads", id="models-title")
        with Horizontal(id="models-body"):
            with Vertical(id="models-targets"):
                yield Label("Target", classes="models--heading")
                yield OptionList(id="target-list", compact=True)
                yield Input(placeholder="add a GGUF path (Enter)", id="add-path", compact=True)
                yield Input(placeholder="plan for a GPU, e.g. RTX 4090 (Enter)", id="plan-gpu", compact=True)
            with Vertical(id="models-drafters"):
                yield Label("Drafter (compatible with the target)", classes="models--heading")
                yield OptionList(id="draft-list", compact=True)
                yield Input(placeholder="…or any drafter path", id="draft-path", compact=True)
                with Horizontal(classes="models--row"):
                    yield Label("quant ")
                    yield Select([], prompt="local file", id="quant", compact=True, allow_blank=True)
                with Horizontal(classes="models--row"):
                    s = self.lsapp.settings
                    yield Label("ctx ")
                    yield Input(str(s.n_ctx), id="n-ctx", compact=True, type="integer")
                    yield Label(" ngl ")
                    yield Input(str(s.n_gpu_layers), id="ngl", compact=True, type="integer")
                    yield Label(" ngld ")
                    yield Input(str(s.n_gpu_layers_draft), id="ngld", compact=True, type="integer")
                with Horizontal(classes="models--row"):
                    yield Button("Load pair", id="load", variant="primary", compact=True)
                    yield Button("Download", id="download", compact=True)
        yield DownloadList(id="downloads")
        yield Static(id="models-status")
        yield Footer()

    def on_mount(self) -> None:
        self.added = [*self.lsapp.settings.added_paths]
        self.watch(self.app, "load_error", self._show_load_error)
        self.watch(self.app, "loading", self._show_loading)
        self.scan()

    # -- status line ----------------------------------------------------------------
    def show_status(self, text: str, error: bool = False) -> None:
        """Show a message (or an error, styled) in place under the lists."""
        status = self.query_one("#models-status", Static)
        status.update(text)
        status.set_class(error, "-error")

    def _show_load_error(self, error: str | None) -> None:
        if error:
            self.show_status(error, error=True)

    def _show_loading(self, loading: str | None) -> None:
        if loading:
            self.show_status(f"Loading {loading} … (the app stays usable)")

    # -- scanning -------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="scan", exit_on_error=False)
    def scan(self, note: str | None = None) -> None:
        """List local models and catalog entries that fit (reads files: off the UI thread);
        then show `note` (else a summary) in the status line."""
        worker = get_current_worker()
        try:
            from localspec.catalog import added_paths, load_catalog
            from localspec.hardware import probe

            paths = [str(p) for p in added_paths()] + self.added
            local = choices.local_models(paths, self.lsapp.settings.hf_cache_dir)
            catalog = load_catalog()
            fixed = self.lsapp.settings.memory_budget_bytes
            plan = self.plan
            if plan is not None:
                budget, name = plan.vram_bytes, plan.name
            elif fixed is not None:
                budget, name = fixed, "the budget"
            else:
                budget, name = choices.memory_budget(probe(), use_gpu=self._int("#ngl", 0) != 0)
            entries = choices.catalog_choices(catalog, budget, name, self._int("#n-ctx", 4096), gpu=plan)
        except LocalSpecError as exc:
            self.app.call_from_thread(self.show_status, str(exc), True)
            return
        if not worker.is_cancelled:
            self.app.call_from_thread(self._fill_targets, local, catalog, entries, note)

    def _fill_targets(
        self, local: list[LocalModel], catalog: Catalog, entries: list[CatalogChoice], note: str | None
    ) -> None:
        self.local, self.catalog, self.catalog_entries = local, catalog, entries
        self.targets.clear()
        options = [Option(Text("Local files", style="bold"), disabled=True)]
        for m in local:
            oid = f"local:{len(self.targets)}"
            self.targets[oid] = TargetEntry(local=m)
            options.append(Option(_row(m.label, f"{m.origin} · {choices.describe_size(m.size)}"), id=oid))
        if entries:
            where = self.plan.name if self.plan is not None else "this machine"
            options.append(Option(Text(f"Catalog — fits {where}", style="bold"), disabled=True))
        for c in entries:
            oid = f"cat:{c.model_id}"
            self.targets[oid] = TargetEntry(catalog=c)
            options.append(Option(_row(c.label, c.reason), id=oid))
        target_list = self.query_one("#target-list", OptionList)
        target_list.clear_options()
        target_list.add_options(options)
        wanted = self.lsapp.current_target_path()
        for oid, entry in self.targets.items():
            if entry.local is not None and wanted and choices.same_file(entry.local.path, wanted):
                target_list.highlighted = target_list.get_option_index(oid)
                break
        else:
            if self.targets:
                target_list.highlighted = target_list.get_option_index(next(iter(self.targets)))
        if note:
            self.show_status(note)
        elif not self.query_one("#models-status").has_class("-error"):  # keep an error on screen
            self.show_status(f"{len(local)} local files, {len(entries)} catalog models fit this machine.")

    # -- target -> drafters -----------------------------------------------------------
    def selected_target(self) -> TargetEntry | None:
        """The highlighted target row."""
        option_list = self.query_one("#target-list", OptionList)
        option = option_list.highlighted_option
        return self.targets.get(option.id or "") if option is not None else None

    @on(OptionList.OptionHighlighted, "#target-list")
    def target_changed(self, event: OptionList.OptionHighlighted) -> None:
        """A new target: list its compatible drafters and its quants."""
        entry = self.targets.get(event.option.id or "")
        if entry is None:
            return
        quant = self.query_one("#quant", Select)
        if entry.catalog is not None:
            quant.set_options([(q, q) for q in reversed(entry.catalog.quants)])
            quant.value = entry.catalog.quants[-1]
        else:
            quant.set_options([])
        self.find_drafters(entry)

    @work(thread=True, exclusive=True, group="drafters", exit_on_error=False)
    def find_drafters(self, entry: TargetEntry) -> None:
        """Judge every local model (and catalog model) as a drafter for the target."""
        worker = get_current_worker()
        local_choices: list[DrafterChoice] = []
        cat_options: list[DrafterOption] = []
        try:
            if entry.local is not None:
                local_choices = choices.drafter_choices(entry.local.path, self.local)
            elif entry.catalog is not None and self.catalog is not None:
                cat_options = choices.catalog_drafter_options(self.catalog, entry.catalog.model_id)
        except LocalSpecError as exc:
            self.app.call_from_thread(self.show_status, str(exc), True)
            return
        if not worker.is_cancelled:
            self.app.call_from_thread(self._fill_drafters, entry, local_choices, cat_options)

    def _fill_drafters(self, entry: TargetEntry, local_choices: list[DrafterChoice],
                       cat_options: list[DrafterOption]) -> None:
        if entry != self.selected_target():
            return  # the user moved on; a newer worker fills the list
        self.drafters_for = entry
        self.drafters = {NO_DRAFTER: ""}
        options = [Option(_row("none", "plain / n-gram drafting only"), id=NO_DRAFTER)]
        for i, d in enumerate(local_choices):
            oid = f"d{i}"
            if d.compatible:
                self.drafters[oid] = d.model.path
                options.append(Option(_row(d.model.label, choices.describe_size(d.model.size)), id=oid))
            else:
                options.append(Option(Text(f"✗ {d.model.label}: {d.problems[0]}", style="dim"), id=oid, disabled=True))
        for i, o in enumerate(cat_options):
            if o.runnable:
                oid = f"cat:{o.id}"
                self.drafters[oid] = oid
                options.append(Option(_row(o.id, "catalog"), id=oid))
            else:
                text = f"✗ {o.label} [{o.kind_label}]: {NOT_RUNNABLE} — {o.why_not}"
                options.append(Option(Text(text, style="dim"), id=f"x{i}", disabled=True))
        draft_list = self.query_one("#draft-list", OptionList)
        draft_list.clear_options()
        draft_list.add_options(options)
        first = next((i for i, o in enumerate(options[1:], 1) if not o.disabled), 0)
        draft_list.highlighted = first

    # -- add a path -------------------------------------------------------------------
    @on(Input.Submitted, "#add-path")
    def add_path(self, event: Input.Submitted) -> None:
        """Add a GGUF path to the list (errors in place)."""
        path = event.value.strip()
        if not path:
            return
        try:
            model = choices.added_model(path)
        except LocalSpecError as exc:
            self.show_status(str(exc), error=True)
            return
        event.input.value = ""
        self.added.append(model.path)
        self.scan(note=f"Added {model.label}.")

    # -- planning for a named GPU -------------------------------------------------------
    @on(Input.Submitted, "#plan-gpu")
    def plan_for_gpu(self, event: Input.Submitted) -> None:
        """Fit the catalog to a GPU from the table (empty: back to this machine); errors in place."""
        name = event.value.strip()
        if not name:
            self.plan = None
            self.scan(note="Planning for this machine.")
            return
        try:
            spec = choices.plan_gpu(name)
        except LocalSpecError as exc:
            self.show_status(str(exc), error=True)
            return
        self.plan = spec
        self.scan(note=f"Planning for {spec.label}: catalog models that fit it, with predicted plain speed.")

    # -- loading ----------------------------------------------------------------------
    def _int(self, selector: str, default: int) -> int:
        try:
            return int(self.query_one(selector, Input).value)
        except (ValueError, LookupError):
            return default

    def _resolve_target(self) -> str:
        entry = self.selected_target()
        if entry is None:
            raise LocalSpecError("Choose a target first (arrow keys in the Target list).")
        if entry.local is not None:
            return entry.local.path
        return self._catalog_path(entry.catalog.model_id)  # type: ignore[union-attr]

    def _catalog_path(self, model_id: str) -> str:
        assert self.catalog is not None
        model = self.catalog.model(model_id)
        quant = self.query_one("#quant", Select).value
        file = model.file_for(str(quant)) if isinstance(quant, str) else model.files[0]
        path = choices.local_file_for(file, self.lsapp.settings.hf_cache_dir)
        if path is None:
            raise LocalSpecError(f"{model.name} {file.quant} is not downloaded yet: press Ctrl+D to download it.")
        return path

    def _resolve_drafter(self) -> str | None:
        typed = self.query_one("#draft-path", Input).value.strip()
        if typed:
            return typed
        option = self.query_one("#draft-list", OptionList).highlighted_option
        value = self.drafters.get(option.id or "", "") if option is not None else ""
        if value.startswith("cat:"):
            return self._catalog_path(value[4:])
        return value or None

    @on(Button.Pressed, "#load")
    def action_load_pair(self) -> None:
        """Load the chosen pair in a worker (compat check first; errors in place)."""
        try:
            target = self._resolve_target()
            draft = self._resolve_drafter()
        except LocalSpecError as exc:
            self.show_status(str(exc), error=True)
            return
        n_ctx = self._int("#n-ctx", 4096)
        target_spec = ModelSpec(target, n_gpu_layers=self._int("#ngl", 0), n_ctx=n_ctx)
        draft_spec = ModelSpec(draft, n_gpu_layers=self._int("#ngld", 0), n_ctx=n_ctx) if draft else None
        self.lsapp.load_pair(target_spec, draft_spec)

    # -- downloads --------------------------------------------------------------------
    @on(Button.Pressed, "#download")
    def action_download(self) -> None:
        """Download the chosen catalog target at the chosen quant (progress below)."""
        entry = self.selected_target()
        if entry is None or entry.catalog is None or self.catalog is None:
            self.show_status("Choose a catalog model (under “Catalog”) to download.", error=True)
            return
        model = self.catalog.model(entry.catalog.model_id)
        quant = self.query_one("#quant", Select).value
        file = model.file_for(str(quant)) if isinstance(quant, str) else model.files[0]
        if choices.local_file_for(file, self.lsapp.settings.hf_cache_dir):
            self.show_status(f"{file.file} is already on this machine: Ctrl+L loads it.")
            return
        if file.parts > 1:
            self.show_status(f"{model.name} {file.quant} is split into {file.parts} files: download it with "
                             f"`localspec models download {model.id} --quant {file.quant}`.", error=True)
            return
        self.show_status(f"Downloading {file.file} from {file.repo} … (✗ or Ctrl+X cancels)")
        self.query_one(DownloadList).start(file.repo, file.file, file.size)

    @on(DownloadFinished)
    def rescan_after_download(self, message: DownloadFinished) -> None:
        """A new file: list it."""
        self.scan(note=f"Downloaded {message.path}. Ctrl+L loads the pair.")

    @on(DownloadFailed)
    def show_download_error(self, message: DownloadFailed) -> None:
        """Show why a download failed, in place."""
        self.show_status(message.error, error=not message.cancelled)

    def action_cancel_downloads(self) -> None:
        """Cancel every running download."""
        self.query_one(DownloadList).cancel_all()

    def action_rescan(self) -> None:
        """Look for models again."""
        self.scan()


def _row(label: str, detail: str) -> Text:
    """An option: the name, then a dim detail (plain text: file names may hold brackets)."""
    return Text.assemble(label, "  ", (detail, "dim"))
