"""The live stats panel: polls the running generation's `stats` every ~0.5 s while a reply
streams and formats it (AL, acceptance, per-position bars, tok/s, speedup vs plain, time
split, backend, numerics, memory). The engine computes the rates; this module only formats
them, except "tok/s now", which is the change in the generation's counters between two polls."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.timer import Timer
from textual.widgets import Label, Sparkline, Static

if TYPE_CHECKING:
    from localspec.engine import Engine, Generation, SpecStats

log = logging.getLogger(__name__)

HIDDEN = "··"
"""Shown instead of volatile numbers in snapshot mode."""
NOT_MEASURED = "—"
MAX_POSITIONS = 6
BAR_WIDTH = 10


def bar(share: float, width: int = BAR_WIDTH) -> str:
    """A text bar for a share in [0, 1]."""
    share = min(1.0, max(0.0, share))
    full = round(share * width)
    return "█" * full + "░" * (width - full)


def format_stats(
    stats: SpecStats | None,
    *,
    kernel: str,
    numerics: str = NOT_MEASURED,
    now_tok_s: float | None = None,
    plain_tok_s: float | None = None,
    hide_volatile: bool = False,
) -> Text:
    """The panel's text block for one stats snapshot (None = nothing generated yet)."""

    def vol(value: str) -> str:
        return HIDDEN if hide_volatile else value

    t = Text()

    def row(label: str, value: str, style: str = "") -> None:
        t.append(f"{label:<9}", style="dim")
        t.append(value + "\n", style=style)

    drafter = stats.drafter if stats is not None and stats.drafter else "—"
    row("backend", kernel)
    row("numerics", stats.numerics if stats is not None and stats.numerics else numerics)
    row("drafter", drafter)
    if stats is None or stats.num_steps == 0:
        row("AL", NOT_MEASURED)
        row("accept", NOT_MEASURED)
    else:
        row("AL", f"{stats.mean_acceptance_length:.2f}", "bold")
        row("accept", f"{stats.acceptance_rate:.0%} ({stats.num_accepted_tokens}/{stats.num_draft_tokens})")
        for i, share in enumerate(stats.per_position_acceptance[:MAX_POSITIONS]):
            t.append(f"  pos {i + 1} ", style="dim")
            t.append(bar(share), style="green")
            t.append(f" {share:4.0%}\n")
    reply = stats.tokens_per_s if stats is not None and stats.t_generate_s > 0 else None
    now = f"{now_tok_s:.1f}" if now_tok_s is not None else NOT_MEASURED
    rep = f"{reply:.1f}" if reply is not None else NOT_MEASURED
    row("tok/s", vol(f"now {now}  reply {rep}"))
    if plain_tok_s and reply:
        row("speedup", vol(f"{reply / plain_tok_s:.2f}× (plain {plain_tok_s:.1f})"), "bold")
    else:
        row("speedup", f"{NOT_MEASURED} (F5 measures plain)")
    if stats is not None and stats.t_generate_s > 0:
        g = stats.t_generate_s
        row("time", vol(f"draft {stats.t_draft_s / g:.0%} verify {stats.t_verify_s / g:.0%}"))
        row("", vol(f"accept {stats.t_accept_s / g:.0%} other {stats.t_other_s / g:.0%}"))
    else:
        row("time", NOT_MEASURED)
    if stats is not None:
        row("tokens", f"{stats.num_generated_tokens} · prompt {stats.num_prompt_tokens}")
    t.rstrip()
    return t


def memory_line(hide_volatile: bool = False) -> str:
    """VRAM and RAM this process uses, one line."""
    if hide_volatile:
        return f"VRAM {HIDDEN}  RAM {HIDDEN}"
    from localspec.hardware import memory_in_use

    try:
        mem = memory_in_use()
    except Exception as exc:  # the memory display must never break the panel
        log.debug("memory probe failed: %s", exc)
        return f"VRAM {NOT_MEASURED}  RAM {NOT_MEASURED}"
    gib = 1 << 30
    vram = NOT_MEASURED
    if mem.gpu_used_bytes is not None:
        vram = f"{mem.gpu_used_bytes / gib:.1f}"
        if mem.gpu_total_bytes:
            vram += f"/{mem.gpu_total_bytes / gib:.0f}"
        vram += " GiB"
    return f"VRAM {vram}  RAM {mem.rss_bytes / gib:.1f} GiB"


class StatsPanel(Vertical):
    """Live speculative-decoding stats of the current (or last) reply."""

    def __init__(self, *, interval_s: float = 0.5, hide_volatile: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.interval_s = interval_s
        self.hide_volatile = hide_volatile
        """Snapshot mode: show no timings, rates or memory."""
        self.kernel = "—"
        """Acceptance backend of the engine (engine.info.kernel)."""
        self.numerics = NOT_MEASURED
        """Numerics mode of the engine's target (engine.info.numerics)."""
        self.plain_tok_s: float | None = None
        """Plain-decoding tok/s measured on this machine for this engine (None = not yet)."""
        self.stats: SpecStats | None = None
        self.now_tok_s: float | None = None
        self._generation: Generation | None = None
        self._timer: Timer | None = None
        self._last: tuple[float, int] | None = None
        self._tps: list[float] = []
        self._al: list[float] = []
        self.border_title = "stats"

    def compose(self) -> ComposeResult:
        yield Static(id="stats-text")
        with Horizontal(classes="stats-panel--spark"):
            yield Label("tok/s ", classes="stats-panel--label")
            yield Sparkline([], id="stats-tps", summary_function=_mean)
        with Horizontal(classes="stats-panel--spark"):
            yield Label("AL    ", classes="stats-panel--label")
            yield Sparkline([], id="stats-al", summary_function=_mean)
        yield Static(id="stats-mem")

    def on_mount(self) -> None:
        self.render_stats()

    # -- driving ------------------------------------------------------------------
    def track(self, generation: Generation) -> None:
        """Start polling `generation` (a reply started)."""
        self._generation = generation
        self._last = None
        self._tps.clear()
        self._al.clear()
        self.now_tok_s = None
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_interval(self.interval_s, self.poll)

    def untrack(self, final: SpecStats | None) -> None:
        """Stop polling and show the final stats of the reply."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._generation = None
        if final is not None:
            self.stats = final
            self.kernel = final.kernel or self.kernel
        self.render_stats()

    def poll(self) -> None:
        """Read a stats snapshot and repaint (called by the interval timer)."""
        if self._generation is None:
            return
        stats = self._generation.stats
        now = time.monotonic()
        if self._last is not None and stats.t_generate_s > 0:
            t0, n0 = self._last
            if now > t0:
                self.now_tok_s = (stats.num_generated_tokens - n0) / (now - t0)
                if not self.hide_volatile:
                    self._tps.append(self.now_tok_s)
        self._last = (now, stats.num_generated_tokens)
        self.stats = stats
        self.render_stats()

    def record_steps(self, tokens_per_step: list[int]) -> None:
        """Tokens emitted by each finished target forward (the AL sparkline's data)."""
        self._al.extend(float(n) for n in tokens_per_step)

    def set_engine(self, engine: Engine | None) -> None:
        """A new engine: forget the last stats and the plain measurement."""
        self.kernel = engine.info.kernel if engine is not None else "—"
        self.numerics = engine.info.numerics if engine is not None else NOT_MEASURED
        self.plain_tok_s = None
        self.stats = None
        self.reset_series()

    def set_plain(self, tok_s: float) -> None:
        """Record the measured plain-decoding speed."""
        self.plain_tok_s = tok_s
        self.render_stats()

    def reset_series(self) -> None:
        """Clear the sparklines (a new chat)."""
        self._tps.clear()
        self._al.clear()
        self.now_tok_s = None
        self.render_stats()

    def render_stats(self) -> None:
        """Repaint every part of the panel from the current state."""
        if not self.is_mounted:
            return
        self.query_one("#stats-text", Static).update(
            format_stats(self.stats, kernel=self.kernel, numerics=self.numerics, now_tok_s=self.now_tok_s,
                         plain_tok_s=self.plain_tok_s, hide_volatile=self.hide_volatile)
        )
        self.query_one("#stats-tps", Sparkline).data = list(self._tps)
        self.query_one("#stats-al", Sparkline).data = list(self._al)
        self.query_one("#stats-mem", Static).update(memory_line(self.hide_volatile))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
