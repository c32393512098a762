"""`ServerSettings`: how the OpenAI-compatible server behaves (pydantic-settings, env LOCALSPEC_*).

Model loading (paths, -ngl, -c, ...) belongs to the CLI, which builds the `Engine`; these
settings cover only the HTTP side. Every field's description doubles as CLI help.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from localspec.types import DRAFTER_KINDS

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


class ServerSettings(BaseSettings):
    """Settings of `localspec serve` (each also read from `LOCALSPEC_<NAME>`)."""

    model_config = SettingsConfigDict(env_prefix="LOCALSPEC_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address to bind. Loopback only unless told otherwise.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 = any free port).")
    api_key: SecretStr | None = Field(
        None, description="If set, /v1/* requires `Authorization: Bearer <key>` (env LOCALSPEC_API_KEY)."
    )
    alias: str | None = Field(
        None, description="Model id served in /v1/models and responses (default: the target's name)."
    )
    strict_model: bool = Field(
        False,
        description="Reject requests whose `model` is not the served alias/target (default: any plain "
        "name is accepted, as llama.cpp's server does, since one model is served).",
    )
    max_queue: int = Field(16, ge=0, description="Requests that may wait while one generates; more get 429.")
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024, description="Largest request body (413 above).")
    default_max_tokens: int | None = Field(
        None, ge=1, description="max_tokens when a request gives none (default: until EOS or the context is full)."
    )
    default_temperature: float = Field(
        1.0, ge=0.0, description="temperature when a request gives none (OpenAI's default, 1.0; 0 = greedy)."
    )
    default_drafter: str = Field(
        "adaptive", description=f"Drafting policy when a request gives none: one of {', '.join(DRAFTER_KINDS)}."
    )
    retry_after_s: int = Field(1, ge=0, description="Retry-After seconds sent with a 429 (queue full).")

    @field_validator("default_drafter")
    @classmethod
    def _check_drafter(cls, value: str) -> str:
        if value not in DRAFTER_KINDS:
            raise ValueError(f"default_drafter must be one of {', '.join(DRAFTER_KINDS)}, got {value!r}")
        return value

    @property
    def api_key_value(self) -> str | None:
        """The API key as text, or None when the server is open."""
        if self.api_key is None or not self.api_key.get_secret_value():
            return None
        return self.api_key.get_secret_value()
