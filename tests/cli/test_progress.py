"""Progress lines for runs logged to a file (`localspec bench … > log`)."""

from __future__ import annotations

from localspec.cli._progress import LineProgress


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lines_come_at_most_every_interval_and_once_at_the_end() -> None:
    clock, lines = Clock(), []
    p = LineProgress(100, lines.append, every_s=60.0, clock=clock)
    for _ in range(10):  # 10 tokens in the first 50 s: no line yet
        clock.t += 5.0
        p(1, "r1/2 coding-01 T=0 plain")
    assert lines == []
    clock.t += 10.0  # 60 s since the start
    p(15, "r1/2 coding-01 T=0 ngram@2")
    assert lines == ["25/100 tokens (25 %), 0:01:00 elapsed, ETA 0:03:00 · r1/2 coding-01 T=0 ngram@2"]
    clock.t += 1.0
    p(5, "r1/2 coding-02 T=0 plain")  # 1 s after the last line: quiet
    assert len(lines) == 1
    clock.t += 1.0
    p(70, "r2/2 stem-05 T=0.8 adaptive@4")  # the last units: a line whatever the interval
    assert lines[-1] == "100/100 tokens (100 %), 0:01:02 elapsed, done · r2/2 stem-05 T=0.8 adaptive@4"
    assert len(lines) == 2


def test_eta_before_any_work_and_hours() -> None:
    clock, lines = Clock(), []
    p = LineProgress(1000, lines.append, every_s=0.0, clock=clock)
    p(0, "warm-up")
    assert lines == ["0/1000 tokens (0 %), 0:00:00 elapsed, ETA ? · warm-up"]
    clock.t += 3600.0
    p(100, "x")
    assert lines[-1] == "100/1000 tokens (10 %), 1:00:00 elapsed, ETA 9:00:00 · x"
