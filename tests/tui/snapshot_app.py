"""Entry file for snapshot tests (and the fake engines of the Pilot tests): builds the app
through the same factory as the CLI, `make_app`, with a deterministic fake pair and
snapshot mode on (no timings, rates or memory figures)."""

from __future__ import annotations

from localspec.engine import Engine
from localspec.engine.fake import FakeBackend
from localspec.tui.app import LocalSpecApp, make_app
from localspec.tui.settings import ChatSettings, TuiSettings

REPLY = (
    "def fib(n: int) -> int:\n"
    '    """The n-th Fibonacci number."""\n'
    "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
)
SCRIPT = "<|im_start|>assistant\n" + REPLY
"""The fake continues the longest suffix of its context found here, so every chat prompt
(which ends with the assistant header) gets REPLY."""


def fake_engine(decode_delay_s: float = 0.0, error_rate: float = 0.25) -> Engine:
    """A fake target plus a fake drafter that is wrong at about `error_rate` of positions."""
    return Engine(
        FakeBackend(script=SCRIPT, name="fake-target-1.5B", decode_delay_s=decode_delay_s),
        FakeBackend(script=SCRIPT, name="fake-draft-0.5B", error_rate=error_rate, seed=1),
        kernel="reference",
    )


SNAPSHOT_SETTINGS = TuiSettings(
    auto_load=False, snapshot=True, memory_budget_bytes=4 << 30, hf_cache_dir="/nonexistent/localspec-snapshot-hf-cache",
    chat=ChatSettings(drafter="model", gamma=4),
)
"""Fixed inputs: no timings, a fixed memory budget, an empty HF cache, and a fixed draft
length (the adaptive policy chooses γ from measured costs, which vary run to run)."""


def make_snapshot_app() -> LocalSpecApp:
    """The app on a fresh fake pair in snapshot mode."""
    return make_app(fake_engine(), SNAPSHOT_SETTINGS)


app = make_snapshot_app()
