"""Tool sources: which MCP servers the loop trains against and serves behind, in one typed config.

The shape follows the `mcpServers` block every MCP client shares (Claude Desktop, Cursor, ...),
so a user can paste theirs: a map from server name to either a stdio server (`command`, `args`,
`env`, `cwd`) or a streamable-HTTP one (`url`). Two differences, both on purpose:

- No literal credentials. An HTTP server's bearer token is read from the environment variable
  that `token_env` names (a Kubernetes Secret, an `.env` file), and a stdio server's secret
  environment from `env_from` (child variable -> our variable). `headers` is refused.
- A stdio server does not inherit our whole environment (the MCP SDK does the same): only
  `INHERITED_ENV`, plus what `env`/`env_from` give it, so a third-party server never sees the
  pipeline's tokens.

`prefix` renames a server's tools for the model (`prefix + name`), which is how two servers
with the same tool name (our `get_current_time` and `mcp-server-time`'s) live in one catalog.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)

from serving.mcp_client.base import DEFAULT_URL, TOKEN_ENV

BUILTIN_SERVER = "toolrl"
"""The name of the project's own MCP server in the default sources."""
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SYSTEMROOT",
)
"""What a stdio server inherits from our environment: what programs need to start, no secrets."""

EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)]
ServerName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")]
Prefix = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")]


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix: Prefix | None = Field(
        default=None,
        description="Prepended to each tool name the model sees (e.g. `time_`); calls are "
        "routed back with it stripped. Needed when two servers share a tool name.",
    )
    timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="Deadline of one request (list or call)."
    )


class HttpSource(_Source):
    """A server reached over MCP streamable HTTP."""

    transport: Literal["http"] = "http"
    url: str = Field(pattern=r"^https?://", description="The MCP endpoint, e.g. .../mcp.")
    token_env: EnvName | None = Field(
        default=None,
        description="Name of the environment variable holding the bearer token (never the "
        "token itself). Unset variable: no token is sent.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_literal_headers(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "headers" in data:
            raise ValueError(
                "`headers` is not read from the config, so no token lands in a YAML file: "
                "put the bearer token in an environment variable and name it in `token_env`"
            )
        return data


class StdioSource(_Source):
    """A server the project starts as a subprocess and speaks to over stdin/stdout."""

    transport: Literal["stdio"] = "stdio"
    command: str = Field(
        min_length=1,
        description="Program to run. A bare name is looked up beside the running Python "
        "(the project venv's bin/, where the byo-mcp extra installs servers), then on PATH; "
        "a relative path is taken from the config file's directory.",
    )
    args: list[str] = Field(default_factory=list)
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="Extra environment of the server (not secrets)."
    )
    env_from: dict[EnvName, EnvName] = Field(
        default_factory=dict,
        description="Server variable -> name of our environment variable to copy it from "
        "(for secrets the server needs).",
    )
    cwd: str | None = Field(default=None, description="Working directory (relative: as above).")


def _transport_of(data: Any) -> str:
    """`transport` when given, else what the `mcpServers` convention implies: a `command`
    is a stdio server, a `url` an HTTP one."""
    if isinstance(data, BaseModel):
        return str(getattr(data, "transport", ""))
    if isinstance(data, Mapping):
        if "transport" in data:
            return str(data["transport"])
        if "command" in data:
            return "stdio"
        if "url" in data:
            return "http"
    return ""


ToolSource = Annotated[
    Annotated[HttpSource, Tag("http")] | Annotated[StdioSource, Tag("stdio")],
    Discriminator(
        _transport_of,
        custom_error_type="tool_source",
        custom_error_message="a server needs `command` (stdio) or `url` (http)",
    ),
]


def _builtin() -> dict[str, HttpSource | StdioSource]:
    return {BUILTIN_SERVER: HttpSource(url=DEFAULT_URL, token_env=TOKEN_ENV)}


class ToolSources(BaseModel):
    """The MCP servers whose tools form the catalog. Default: the project's own server."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    servers: dict[ServerName, ToolSource] = Field(
        default_factory=_builtin,
        min_length=1,
        validation_alias=AliasChoices("servers", "mcpServers"),
        description="Server name -> source; `mcpServers` is accepted as the key, so an MCP "
        "client's config block can be pasted.",
    )
    log_dir: str | None = Field(
        default=None,
        description="Where stdio servers' stderr goes (`NAME.stderr.log`, rotated at 1 MiB); "
        "unset: kept in memory, the tail quoted in errors.",
    )


def load_tool_sources(path: Path) -> ToolSources:
    """A YAML (or JSON) file holding `servers:` (or `mcpServers:`)."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must hold a mapping with `servers:`")
    return ToolSources.model_validate(raw)


def resolve_command(command: str, base_dir: Path, path_env: str | None) -> str:
    """The program a stdio source names, as `StdioSource.command` documents."""
    if os.sep in command or (os.altsep and os.altsep in command):
        candidate = Path(command).expanduser()
        return str(candidate if candidate.is_absolute() else base_dir / candidate)
    beside_python = shutil.which(command, path=str(Path(sys.executable).parent))
    return beside_python or shutil.which(command, path=path_env) or command


def child_env(
    name: str, source: StdioSource, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The environment a stdio server starts with, and the problems (unset secrets)."""
    env = {key: environ[key] for key in INHERITED_ENV if key in environ}
    env.update(source.env)
    problems = []
    for key, ours in source.env_from.items():
        if ours in environ:
            env[key] = environ[ours]
        else:
            problems.append(f"MCP server '{name}': env_from {key} needs ${ours}, which is not set")
    return env, problems
