"""Every configuration key toolrl reads, in one typed registry, and the settings built from it.

Why one module: the deployment under ``infra/`` (compose, Kubernetes, Helm values) sets
environment variables and Airflow connections, and the code reads them. If each module called
``os.environ`` on its own, a renamed key would fail only at run time on a cluster. Here every key
is declared once, with a one-line doc, which deployed component reads it, whether a deployment
must set it, and the value the embedded one-machine setup uses. ``tests/infra`` compares this
registry with what ``infra/`` sets, in both directions, so the two cannot drift.

Who reads what:

* Airflow (scheduler, dag-processor, triggerer, workers) reaches the other services through
  Airflow connections (``CONNECTIONS``; on a cluster provided as ``AIRFLOW_CONN_<ID>``
  environment variables from Kubernetes Secrets), and reads plain settings from the environment.
* Ray training pods, the serving pod and the MCP server read the environment only
  (``ServiceSettings.from_env``). Library code takes values as arguments: only entry points
  call ``from_env``.
* Control-plane credentials are registered too, as required secrets: the Ray cluster token
  (``RAY_AUTH_TOKEN``, with ``RAY_AUTH_MODE=token``), the MLflow identity of each client
  (``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD``), the MCP token and the front door's API key.
  So the drift test fails for a deployment that leaves one out, and ``secret_keys`` keeps them
  out of Ray jobs' ``runtime_env``.

This module has no import-time side effects: it reads nothing until ``from_env`` is called with
a mapping (usually ``os.environ``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

Component = Literal["airflow", "ray", "serving", "mcp", "cli"]
"""Where a key is read: the Airflow services, Ray head/workers (training), the vLLM serving pod,
the MCP tool server, or the ``toolrl`` command run from an operator's shell (never deployed)."""

DEPLOYED_COMPONENTS: tuple[Component, ...] = ("airflow", "ray", "serving", "mcp")
"""Components that ``infra/`` runs; the drift test checks each of them."""


@dataclass(frozen=True)
class EnvVar:
    """One environment variable the code reads."""

    name: str
    doc: str
    read_by: frozenset[Component]
    required: bool
    """A deployment must set it for every component in ``read_by`` (the default only fits the
    embedded one-machine setup)."""
    default: str | None
    """The embedded default; ``None`` means unset, which turns the feature off."""
    secret: bool = False
    """Comes from a secret store (Kubernetes Secret, ``.env`` file), never from Git."""
    set_by: Literal["deployment", "job"] = "deployment"
    """``job``: the submitter puts it in each Ray job's ``runtime_env`` (it differs per run), so
    a deployment must not set it on the pods."""


@dataclass(frozen=True)
class AirflowConnection:
    """One Airflow connection id the DAGs and plugins read (never at DAG parse time)."""

    conn_id: str
    conn_type: str
    doc: str
    required: bool
    default_uri: str
    """The embedded setup's value, in Airflow's connection URI form."""

    @property
    def env_var(self) -> str:
        """The variable Airflow's environment secrets backend reads this connection from."""
        return f"AIRFLOW_CONN_{self.conn_id.upper()}"


@dataclass(frozen=True)
class AirflowVariable:
    """One Airflow Variable read at task run time (never at DAG parse time)."""

    key: str
    doc: str
    required: bool
    default: str

    @property
    def env_var(self) -> str:
        """The variable Airflow's environment secrets backend reads this Variable from."""
        return f"AIRFLOW_VAR_{self.key.upper()}"


def _c(*names: Component) -> frozenset[Component]:
    return frozenset(names)


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        "MLFLOW_TRACKING_URI",
        "MLflow tracking server: training logs metrics to it, serving resolves models there.",
        _c("ray", "serving", "cli"),
        required=True,
        default="http://127.0.0.1:5000",
    ),
    EnvVar(
        "MLFLOW_TRACKING_USERNAME",
        "MLflow basic-auth user: toolrl-pipeline on Ray (logs runs), toolrl-serving (reads).",
        _c("ray", "serving", "cli"),
        required=True,
        default=None,
    ),
    EnvVar(
        "MLFLOW_TRACKING_PASSWORD",
        "Password of MLFLOW_TRACKING_USERNAME (MLflow's client sends it on every request).",
        _c("ray", "serving", "cli"),
        required=True,
        default=None,
        secret=True,
    ),
    EnvVar(
        "MLFLOW_S3_ENDPOINT_URL",
        "S3-compatible endpoint for artifacts and checkpoints; unset means AWS S3 itself.",
        _c("ray", "serving", "cli"),
        required=False,
        default="http://127.0.0.1:9000",
    ),
    EnvVar(
        "AWS_ACCESS_KEY_ID",
        "Object store key id; unset lets boto3 use an instance or pod identity instead.",
        _c("ray", "serving", "cli"),
        required=False,
        default="testing",
        secret=True,
    ),
    EnvVar(
        "AWS_SECRET_ACCESS_KEY",
        "Object store secret key, paired with AWS_ACCESS_KEY_ID.",
        _c("ray", "serving", "cli"),
        required=False,
        default="testing",
        secret=True,
    ),
    EnvVar(
        "AWS_DEFAULT_REGION",
        "Object store region (S3-compatible stores accept any).",
        _c("ray", "serving", "cli"),
        required=False,
        default="us-east-1",
    ),
    EnvVar(
        "TOOLRL_S3_BUCKET",
        "Bucket that holds datasets, checkpoints and reports (MLflow's artifact root is apart).",
        _c("airflow", "ray", "serving", "cli"),
        required=True,
        default="toolrl",
    ),
    EnvVar(
        "TOOLRL_RAY_ADDRESS",
        "Ray Jobs API address for `toolrl train submit` (Airflow uses the toolrl_ray connection).",
        _c("cli"),
        required=False,
        default="http://127.0.0.1:8265",
    ),
    EnvVar(
        "RAY_AUTH_MODE",
        "Ray's own auth switch: `token` on every Ray node of a deployment.",
        _c("ray"),
        required=True,
        default=None,
    ),
    EnvVar(
        "RAY_AUTH_TOKEN",
        "Ray cluster token: every node requires it; `toolrl train` sends it to the Jobs API.",
        _c("ray", "cli"),
        required=True,
        default=None,
        secret=True,
    ),
    EnvVar(
        "TOOLRL_MODEL_CACHE",
        "Cache of converted package:// base models (default ~/.cache/toolrl/models).",
        _c("ray", "cli"),
        required=False,
        default=None,
    ),
    EnvVar(
        "TOOLRL_MCP_URL",
        "MCP tool server endpoint: the mock server for training rollouts, the real one in serving.",
        _c("ray", "serving", "cli"),
        required=True,
        default="http://127.0.0.1:8000/mcp",
    ),
    EnvVar(
        "TOOLRL_MCP_TOKEN",
        "Bearer token: the MCP server requires it when set, and its clients send it.",
        _c("ray", "serving", "mcp", "cli"),
        required=True,
        default=None,
        secret=True,
    ),
    EnvVar(
        "TOOLRL_FRONTDOOR_API_KEY",
        "Bearer key the serving front door requires (default of `toolrl serve --api-key`).",
        _c("serving", "cli"),
        required=True,
        default=None,
        secret=True,
    ),
    EnvVar(
        "TOOLRL_JUDGE_URL",
        "OpenAI-compatible endpoint of the LLM judge; unset turns the judge reward off.",
        _c("ray", "cli"),
        required=False,
        default=None,
    ),
    EnvVar(
        "TOOLRL_JUDGE_MODEL",
        "Model name the judge endpoint serves.",
        _c("ray", "cli"),
        required=False,
        default=None,
    ),
    EnvVar(
        "TOOLRL_JUDGE_API_KEY",
        "API key for the judge endpoint.",
        _c("ray", "cli"),
        required=False,
        default=None,
        secret=True,
    ),
    EnvVar(
        "MLFLOW_RUN_ID",
        "MLflow run a training job logs into (verl's mlflow logger); one per DAG run.",
        _c("ray"),
        required=False,
        default=None,
        set_by="job",
    ),
    EnvVar(
        "TOOLRL_CHECKPOINT_S3_URI",
        "s3://bucket/prefix a training run mirrors its checkpoints to; unset keeps them local.",
        _c("ray"),
        required=False,
        default=None,
        set_by="job",
    ),
    EnvVar(
        "TOOLRL_CHECKPOINT_KEEP",
        "How many complete checkpoints a run keeps in S3 (older ones are pruned).",
        _c("ray"),
        required=False,
        default="3",
        set_by="job",
    ),
    EnvVar(
        "TOOLRL_DRIFT_DIR",
        "Where reward workers record per-rollout call counts for the format-drift guard.",
        _c("ray"),
        required=False,
        default=None,
        set_by="job",
    ),
    EnvVar(
        "TOOLRL_MODEL_NAME",
        "Registered model name in MLflow; serving loads models:/<name>@champion.",
        _c("airflow", "serving", "cli"),
        required=True,
        default="toolrl-tool-caller",
    ),
    EnvVar(
        "TOOLRL_PIPELINE_CONFIG",
        "YAML file overriding PipelineConfig (dataset size, data root, spec, thresholds).",
        _c("airflow", "cli"),
        required=False,
        default=None,
    ),
    EnvVar(
        "TOOLRL_SERVING_URL",
        "Front door of the serving stack, reported after a promotion (it reloads by itself).",
        _c("airflow"),
        required=False,
        default=None,
    ),
    EnvVar(
        "TOOLRL_CHROMIUM",
        "Browser `toolrl demo` screenshots its pages with (default: a Chromium on PATH).",
        _c("cli"),
        required=False,
        default=None,
    ),
)

CONNECTIONS: tuple[AirflowConnection, ...] = (
    AirflowConnection(
        "toolrl_ray",
        "http",
        "Ray Jobs API (the head's dashboard port) jobs are submitted to; password = the token.",
        required=True,
        default_uri="http://127.0.0.1:8265",
    ),
    AirflowConnection(
        "toolrl_mlflow",
        "http",
        "MLflow tracking server and registry; login/password = the pipeline identity.",
        required=True,
        default_uri="http://127.0.0.1:5000",
    ),
    AirflowConnection(
        "toolrl_s3",
        "aws",
        "Object store: login/password are the keys, extra endpoint_url for S3-compatible stores.",
        required=True,
        default_uri=(
            "aws://testing:testing@/?region_name=us-east-1"
            "&endpoint_url=http%3A%2F%2F127.0.0.1%3A9000"
        ),
    ),
    AirflowConnection(
        "toolrl_mcp",
        "http",
        "MCP tool server the evaluation's agent loop calls; password is the bearer token.",
        required=True,
        default_uri="http://127.0.0.1:8000/mcp",
    ),
    AirflowConnection(
        "toolrl_judge",
        "http",
        "LLM judge endpoint (OpenAI-compatible); extra `model`; absent turns the judge off.",
        required=False,
        default_uri="",
    ),
)

VARIABLES: tuple[AirflowVariable, ...] = (
    AirflowVariable(
        "toolrl_training_spec",
        "TrainingSpec YAML that scheduled runs train instead of the pipeline config's "
        "`training_spec` (relative: shipped with toolrl, e.g. training/specs/cpu_tiny.yaml); "
        "empty: the config's. A DAG-run `spec` param overrides both.",
        required=False,
        default="",
    ),
    AirflowVariable(
        "toolrl_gate_thresholds",
        "Gate thresholds YAML that scheduled runs are judged by instead of the pipeline "
        "config's `thresholds` (relative: shipped with toolrl, e.g. "
        "training/specs/thresholds_demo.yaml for the CPU demo spec); empty: the config's. A "
        "DAG-run `thresholds` param overrides both.",
        required=False,
        default="",
    ),
)


def env_var(name: str) -> EnvVar:
    """Look a key up, so a typo in calling code fails loudly instead of reading nothing."""
    for var in ENV_VARS:
        if var.name == name:
            return var
    raise KeyError(f"{name} is not a registered toolrl setting; add it to serving/settings.py")


def keys_read_by(component: Component, *, required_only: bool = False) -> frozenset[str]:
    """Every environment variable a deployment may set for a component: its env vars (less the
    per-job ones the submitter sets), plus for Airflow the ``AIRFLOW_CONN_*`` and
    ``AIRFLOW_VAR_*`` variables its connections and Variables come from."""
    keys = {
        var.name
        for var in ENV_VARS
        if component in var.read_by
        and var.set_by == "deployment"
        and (var.required or not required_only)
    }
    if component == "airflow":
        keys |= {c.env_var for c in CONNECTIONS if c.required or not required_only}
        keys |= {v.env_var for v in VARIABLES if v.required or not required_only}
    return frozenset(keys)


def secret_keys() -> frozenset[str]:
    """Keys whose values must come from a secret store; connections may carry credentials."""
    return frozenset({v.name for v in ENV_VARS if v.secret} | {c.env_var for c in CONNECTIONS})


class ServiceSettings(BaseModel):
    """The typed settings of a process outside Airflow (Ray job, serving, MCP server, CLI).

    Field aliases are the environment variable names; unknown fields are rejected so that a
    renamed key cannot slip through a constructor call.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    mlflow_tracking_uri: str = Field(alias="MLFLOW_TRACKING_URI")
    mlflow_tracking_username: str | None = Field(alias="MLFLOW_TRACKING_USERNAME")
    mlflow_tracking_password: SecretStr | None = Field(alias="MLFLOW_TRACKING_PASSWORD")
    mlflow_s3_endpoint_url: str | None = Field(alias="MLFLOW_S3_ENDPOINT_URL")
    aws_access_key_id: SecretStr | None = Field(alias="AWS_ACCESS_KEY_ID")
    aws_secret_access_key: SecretStr | None = Field(alias="AWS_SECRET_ACCESS_KEY")
    aws_default_region: str | None = Field(alias="AWS_DEFAULT_REGION")
    s3_bucket: str = Field(alias="TOOLRL_S3_BUCKET", min_length=3, max_length=63)
    ray_address: str | None = Field(alias="TOOLRL_RAY_ADDRESS")
    ray_auth_mode: str | None = Field(alias="RAY_AUTH_MODE")
    ray_auth_token: SecretStr | None = Field(alias="RAY_AUTH_TOKEN")
    mcp_url: str = Field(alias="TOOLRL_MCP_URL")
    model_cache: str | None = Field(alias="TOOLRL_MODEL_CACHE")
    mcp_token: SecretStr | None = Field(alias="TOOLRL_MCP_TOKEN")
    frontdoor_api_key: SecretStr | None = Field(alias="TOOLRL_FRONTDOOR_API_KEY")
    judge_url: str | None = Field(alias="TOOLRL_JUDGE_URL")
    judge_model: str | None = Field(alias="TOOLRL_JUDGE_MODEL")
    judge_api_key: SecretStr | None = Field(alias="TOOLRL_JUDGE_API_KEY")
    mlflow_run_id: str | None = Field(alias="MLFLOW_RUN_ID")
    checkpoint_s3_uri: str | None = Field(alias="TOOLRL_CHECKPOINT_S3_URI", pattern=r"^s3://")
    checkpoint_keep: int = Field(alias="TOOLRL_CHECKPOINT_KEEP", ge=1)
    model_name: str = Field(alias="TOOLRL_MODEL_NAME", min_length=1)
    drift_dir: str | None = Field(alias="TOOLRL_DRIFT_DIR")
    pipeline_config: str | None = Field(alias="TOOLRL_PIPELINE_CONFIG")
    serving_url: str | None = Field(alias="TOOLRL_SERVING_URL")
    chromium: str | None = Field(alias="TOOLRL_CHROMIUM")

    @field_validator(
        "mlflow_tracking_uri",
        "mlflow_s3_endpoint_url",
        "ray_address",
        "mcp_url",
        "judge_url",
        "serving_url",
    )
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        """Endpoints are HTTP(S) URLs; a bare host:port here is a common deployment mistake."""
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http(s):// URL, got {value!r}")
        return value

    @property
    def judge_enabled(self) -> bool:
        """The judge reward runs only when both its endpoint and model are configured."""
        return self.judge_url is not None and self.judge_model is not None

    @property
    def champion_uri(self) -> str:
        """The registry URI that serving loads: the model the gate last promoted."""
        return f"models:/{self.model_name}@champion"

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, require_for: Component | None = None) -> Self:
        """Build settings from an environment mapping (usually ``os.environ``).

        Unset or empty keys take the embedded default. With ``require_for``, a key that the
        component must have in a deployment but that is missing raises instead: on a cluster a
        silent loopback default would point at nothing.
        """
        if require_for is not None:
            missing = sorted(
                var.name
                for var in ENV_VARS
                if var.required and require_for in var.read_by and not env.get(var.name)
            )
            if missing:
                raise ValueError(f"{require_for} needs these settings: {', '.join(missing)}")
        values = {var.name: env.get(var.name) or var.default for var in ENV_VARS}
        return cls.model_validate(values)
