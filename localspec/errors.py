"""Exceptions raised by localspec. Every message says what went wrong and what to do next."""

from __future__ import annotations


class LocalSpecError(Exception):
    """Base class of every error localspec raises on purpose."""


class ModelNotFoundError(LocalSpecError):
    """A model file or repository does not exist where it was asked for."""


class ModelLoadError(LocalSpecError):
    """llama.cpp could not load a GGUF file."""


class DecodeError(LocalSpecError):
    """llama.cpp failed to evaluate a batch of tokens (llama_decode returned an error code)."""


class WorkerLostError(DecodeError):
    """An RPC worker holding layers of a loaded model is gone; the model cannot run until the
    worker is back and the model is loaded again. `endpoint` names the worker."""

    def __init__(self, message: str, endpoint: str) -> None:
        super().__init__(message)
        self.endpoint = endpoint


class IncompatibleModelsError(LocalSpecError):
    """The drafter cannot draft for the target (different tokenizers)."""


class ContextOverflowError(LocalSpecError):
    """The prompt (plus what must be generated) does not fit in the context window."""


class InvalidRequestError(LocalSpecError):
    """A generation request has a bad parameter. `param` names it."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class EngineBusyError(LocalSpecError):
    """The engine is serving another generation and the caller asked not to wait."""


class KernelUnavailableError(LocalSpecError):
    """An acceptance backend was forced but cannot run here; the message says why."""


class DownloadError(LocalSpecError):
    """A model download failed; nothing partial was left where the app would load it."""


class DownloadCancelledError(DownloadError):
    """A download was cancelled by the user."""


class InsufficientDiskError(DownloadError):
    """There is not enough free disk space for a download."""


class ChecksumMismatchError(DownloadError):
    """A file's sha256 differs from the expected one; the file was discarded."""


class StoreError(LocalSpecError):
    """The local model store could not assemble or verify a model."""


class PromptSetError(LocalSpecError):
    """A benchmark prompt file cannot be read or has no prompts in the wanted categories."""
