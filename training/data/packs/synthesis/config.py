"""The settings of an LLM synthesis run: which endpoint, how much to ask, how hard."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SynthesisConfig(BaseModel):
    """The endpoint and how hard to ask it (`ParaphraseConfig`'s conventions)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="Base URL of an OpenAI-compatible API, e.g. http://host:8000/v1")
    model: str = Field(default="default", description="Model name sent to the endpoint.")
    api_key: str | None = Field(default=None, description="Bearer token, if needed.")
    proposals: int = Field(default=20, ge=1, le=10_000, description="Tasks to ask for.")
    per_request: int = Field(default=4, ge=1, le=20, description="Tasks asked per request.")
    concurrency: int = Field(default=4, ge=1, le=64, description="Requests in flight.")
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout.")
    retries: int = Field(default=2, ge=0, le=10, description="Retries with backoff.")
    temperature: float = Field(default=0.9, ge=0, le=2)
    max_tokens: int = Field(default=1_500, ge=16, le=32_768)
    max_reply_bytes: int = Field(
        default=256 * 1024, ge=1_024, description="A longer HTTP body is refused unread."
    )
    max_reply_chars: int = Field(
        default=32_000, ge=100, description="A longer message content is refused unparsed."
    )
    samples: int = Field(default=3, ge=0, le=10, description="Executed calls shown.")
    json_mode: bool = Field(
        default=True, description="Send response_format json_object (dropped on a 400)."
    )
