"""The stats panel's formatting (pure) and its polling of a live engine."""

from __future__ import annotations

from localspec.engine import SpecStats
from localspec.tui.widgets.stats_panel import HIDDEN, bar, format_stats, memory_line


def _stats() -> SpecStats:
    s = SpecStats(kernel="reference", drafter="model")
    s.observe_step(4, 4, 0.01, 0.02, 0.001, "model")
    s.observe_step(4, 1, 0.01, 0.02, 0.001, "model")
    s.num_generated_tokens = 7
    s.t_generate_s = 0.1
    return s


def test_bar_clamps_and_scales() -> None:
    assert bar(0.5, 10) == "█████░░░░░"
    assert bar(2.0, 4) == "████"
    assert bar(-1.0, 4) == "░░░░"


def test_format_stats_shows_al_acceptance_positions_and_speedup() -> None:
    text = format_stats(_stats(), kernel="reference", now_tok_s=60.0, plain_tok_s=35.0).plain
    assert "AL       3.50" in text  # 1 + 5 accepted / 2 steps
    assert "62% (5/8)" in text
    assert "pos 1" in text and "pos 4" in text and "100%" in text and " 50%" in text
    assert "reply 70.0" in text and "now 60.0" in text
    assert "2.00× (plain 35.0)" in text
    assert "draft 20% verify 40%" in text


def test_format_stats_shows_the_numerics_mode_that_ran() -> None:
    assert "numerics fast" in format_stats(None, kernel="reference", numerics="fast").plain  # the engine's
    s = _stats()
    s.numerics = "exact"
    assert "numerics exact" in format_stats(s, kernel="reference", numerics="fast").plain  # the reply's own


def test_format_stats_before_measuring_shows_dashes() -> None:
    text = format_stats(None, kernel="reference").plain
    assert "AL       —" in text
    assert "speedup  — (F5 measures plain)" in text


def test_format_stats_hides_volatile_numbers_in_snapshot_mode() -> None:
    text = format_stats(_stats(), kernel="reference", now_tok_s=60.0, plain_tok_s=35.0, hide_volatile=True).plain
    assert "70.0" not in text and "2.00×" not in text and "verify 40%" not in text
    assert HIDDEN in text
    assert "3.50" in text  # counts are deterministic and stay
    assert memory_line(hide_volatile=True) == f"VRAM {HIDDEN}  RAM {HIDDEN}"


def test_memory_line_reports_ram_of_this_process() -> None:
    line = memory_line()
    assert line.startswith("VRAM ") and "RAM " in line and "GiB" in line.split("RAM", 1)[1]
