"""`localspec tui` and bare `localspec`: flags reach TuiSettings, and both open the app."""

from __future__ import annotations

import pytest

from localspec.cli import main
from localspec.tui.settings import TuiSettings


class _Recorder:
    def __init__(self) -> None:
        self.settings: list[TuiSettings] = []

    def make_app(self, engine: object = None, settings: TuiSettings | None = None) -> _Recorder:
        assert engine is None
        assert settings is not None
        self.settings.append(settings)
        return self

    def run(self) -> None:
        pass


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    rec = _Recorder()
    monkeypatch.setattr("localspec.tui.app.make_app", rec.make_app)
    return rec


def test_tui_flags_reach_settings(recorder: _Recorder) -> None:
    code = main(["tui", "-m", "t.gguf", "-md", "d.gguf", "-ngl", "99", "-ngld", "-1", "-c", "8192",
                 "--temp", "0.7", "--seed", "3", "--spec-draft-n-max", "6", "-t", "3", "-no-fa",
                 "--numerics", "fast", "--kernel", "reference"])
    assert code == 0
    (s,) = recorder.settings
    assert (s.target, s.draft, s.n_gpu_layers, s.n_gpu_layers_draft, s.n_ctx) == ("t.gguf", "d.gguf", 99, -1, 8192)
    assert (s.n_threads, s.flash_attn, s.numerics, s.kernel) == (3, False, "fast", "reference")
    assert (s.chat.temperature, s.chat.seed, s.chat.gamma) == (0.7, 3, 6)


def test_bare_localspec_opens_the_tui_on_the_default_pair(recorder: _Recorder) -> None:
    assert main([]) == 0
    (s,) = recorder.settings
    assert s.target is None and s.draft is None and s.auto_load  # the app loads default_pair_paths()
    assert (s.numerics, s.n_ctx, s.chat.gamma) == ("exact", 4096, None)  # every flag at its default


def test_tui_drafter_without_target_is_a_usage_error(recorder: _Recorder) -> None:
    assert main(["tui", "-md", "d.gguf"]) != 0
    assert not recorder.settings
