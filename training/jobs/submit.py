"""Submit training to a Ray cluster through the Ray Jobs API.

Ray Jobs do not retry and the submitter may be retried (an Airflow task, a user pressing
enter twice). So the submission id is a pure function of (spec name, run key, attempt): a
retried submit finds the job it already started instead of starting a second one. A new
attempt (after a failure) is an explicit, different attempt number.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
ACTIVE = ("PENDING", "RUNNING")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
#: Never shipped to the cluster with the code.
EXCLUDES = [
    ".venv",
    ".git",
    "runs",
    "data_out",
    "**/__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "benchmarks/results",
]
#: Non-secret settings forwarded to the job (values read from the submitter's env). Secrets
#: (keys, tokens) never go into a runtime_env, which the Ray dashboard displays: cluster pods
#: get them from Kubernetes Secrets, a local Ray head inherits them from its own env.
FORWARDED_ENV = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_RUN_ID",
    "MLFLOW_S3_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
    "TOOLRL_S3_BUCKET",
    "TOOLRL_MCP_URL",
    "TOOLRL_MODEL_NAME",
    "TOOLRL_JUDGE_URL",
    "TOOLRL_JUDGE_MODEL",
)


class RayUnavailableError(RuntimeError):
    """The Ray Jobs API cannot be reached. Retryable: the cluster may be restarting."""


class SubmissionConflictError(RuntimeError):
    """The deterministic submission id already ran to a failure: use the next attempt."""


class PackageTooLargeError(RuntimeError):
    """The shipped checkout is over the Ray Jobs API's upload limit. Not retryable as is."""


def git_ignored_excludes(root: Path) -> list[str]:
    """Everything git ignores under `root`, as root-anchored patterns for Ray's `excludes`.

    Ray packages `working_dir` honouring `.gitignore` files only, not `.git/info/exclude`
    or a global excludes file, so a large local folder ignored that way (datasets, model
    copies) was uploaded and the Jobs API refused the package (HTTP 413 over 100 MiB).
    Asking git gives the same view of the checkout as `git status`. Outside a git checkout,
    or without git, this is empty and the static list applies alone."""
    import subprocess

    try:
        listed = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "--others",
                "--ignored",
                "--exclude-standard",
                "--directory",
                "-z",
            ],
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    paths = (p.decode("utf-8", "surrogateescape") for p in listed.split(b"\0") if p)
    return sorted(f"/{path.rstrip('/')}" for path in paths if not path.startswith(".git/"))


@dataclass(frozen=True)
class JobRequest:
    submission_id: str
    entrypoint: str
    runtime_env: dict[str, Any]
    metadata: dict[str, str] = field(default_factory=dict)
    entrypoint_num_cpus: float = 1.0

    def describe(self) -> str:
        """What is submitted, with env vars by name only (never their values)."""
        names = sorted(self.runtime_env.get("env_vars", {}))
        return (
            f"submission {self.submission_id}\n  entrypoint: {self.entrypoint}\n"
            f"  env (names only): {', '.join(names) or 'none'}"
        )


@dataclass(frozen=True)
class SubmitResult:
    submission_id: str
    status: str
    created: bool


def submission_id(spec_name: str, run_key: str, attempt: int = 1) -> str:
    """`toolrl-<name>-<hash of run key>-a<attempt>`: stable across retries of one attempt."""
    if attempt < 1:
        raise ValueError("attempt must be >= 1")
    safe = re.sub(r"[^a-z0-9-]", "-", spec_name.lower())[:40].strip("-") or "run"
    digest = hashlib.sha256(run_key.encode()).hexdigest()[:12]
    return f"toolrl-{safe}-{digest}-a{attempt}"


def is_checkout(root: Path) -> bool:
    """A source checkout (its pyproject.toml beside the packages), not an installed copy."""
    return (root / "pyproject.toml").is_file()


def open_attempt(client: Any, spec_name: str, run_key: str, first: int = 1, most: int = 20) -> int:
    """The first attempt from `first` whose job did not end FAILED or STOPPED: a re-run of
    the submit (a cleared Airflow task after the Ray worker died) starts the next attempt,
    which resumes from the run's last complete checkpoint, instead of being refused with
    `SubmissionConflictError` forever; an attempt still running or succeeded is reused."""
    for attempt in range(first, first + most):
        if get_status(client, submission_id(spec_name, run_key, attempt)) not in (
            "FAILED",
            "STOPPED",
        ):
            return attempt
    raise SubmissionConflictError(
        f"{most} attempts of {spec_name} for run {run_key} ended failed: read their logs "
        "(toolrl train logs ID) before submitting again"
    )


def runtime_env(
    env: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
    ship_code: bool | None = None,
    root: Path = REPO_ROOT,
) -> dict[str, Any]:
    """The job's env vars (settings by name, never secrets) and, from a checkout, the code.

    `ship_code` None: ship `root` when it is a checkout (a laptop, the demo, the tests: the
    cluster runs the submitter's code). From an installed toolrl (the Airflow image, where
    `root` is site-packages) nothing is shipped: the cluster's training image has the same
    release, and packaging site-packages was refused by the Jobs API's upload limit."""
    from serving.settings import secret_keys

    if ship_code is None:
        ship_code = is_checkout(root)

    secrets = secret_keys()
    env_vars = {name: env[name] for name in FORWARDED_ENV if env.get(name)}
    env_vars.update(extra_env or {})
    leaked = sorted(name for name in env_vars if name in secrets)
    if leaked:
        raise ValueError(f"refusing to put secrets in a Ray runtime_env: {', '.join(leaked)}")
    result: dict[str, Any] = {"env_vars": env_vars}
    if ship_code:
        result["working_dir"] = str(root)
        result["excludes"] = EXCLUDES + [
            path for path in git_ignored_excludes(root) if path.strip("/") not in EXCLUDES
        ]
    return result


class RayAuthError(RuntimeError):
    """The Ray Jobs API refused the request's token (none sent, or the wrong one). Not
    retryable: a retry sends the same token."""


AUTH_HINT = (
    "The cluster runs with RAY_AUTH_MODE=token: give the submitter the cluster's token "
    "(`ray get-auth-token` on the head): the password of the Airflow connection `toolrl_ray`, "
    "or RAY_AUTH_TOKEN for the `toolrl train` commands."
)


_STATUS = re.compile(r"(?:status(?: code)?|HTTP)[ :=]*([1-5]\d\d)\b", re.IGNORECASE)
"""An HTTP status in an error message, as Ray and aiohttp write it ("status code 401")."""


def auth_failure(exc: BaseException, address: str) -> RayAuthError | None:
    """A RayAuthError naming what is wrong when `exc` is Ray's 401/403, else None."""
    text = str(exc)
    # the status as Ray words it, never a bare "401": a job id's hash may contain one
    status = _STATUS.search(text.split("\n")[0])
    code = status.group(1) if status else ""
    if "Authentication required" in text or code == "401":
        return RayAuthError(
            f"the Ray Jobs API at {address} wants a token and none was sent. {AUTH_HINT}"
        )
    if "Authentication failed" in text or code == "403":
        return RayAuthError(
            f"the Ray Jobs API at {address} refused the token it was sent. {AUTH_HINT}"
        )
    return None


def connect(address: str, token: str | None = None) -> Any:
    """A Jobs API client; with `token`, every request carries it as a bearer token (Ray's
    token authentication, RAY_AUTH_MODE=token on the cluster)."""
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return JobSubmissionClient(address, headers=headers)
    except Exception as exc:  # its version check raises Ray's AuthenticationError on 401/403
        refused = auth_failure(exc, address)
        if refused is not None:
            raise refused from None
        if not isinstance(exc, (ConnectionError, RuntimeError, OSError, ValueError)):
            raise
        raise RayUnavailableError(
            f"cannot reach the Ray Jobs API at {address}: {str(exc).splitlines()[0][:200]}. "
            "Is the Ray head running (ray start --head) with ray[default] installed?"
        ) from exc


def get_status(client: Any, job_id: str) -> str | None:
    """The job's status, or None when no job has that id."""
    try:
        return str(client.get_job_status(job_id).value)
    except Exception as exc:  # Ray raises RuntimeError, or its AuthenticationError on 401/403
        refused = auth_failure(exc, str(getattr(client, "_address", "the cluster")))
        if refused is not None:
            raise refused from None
        status = _STATUS.search(str(exc))
        missing = "does not exist" in str(exc) or (status is not None and status.group(1) == "404")
        if isinstance(exc, RuntimeError) and missing:
            return None
        raise


def submit(client: Any, request: JobRequest) -> SubmitResult:
    """Submit once: an active or finished job with the same id is returned, not duplicated."""
    status = get_status(client, request.submission_id)
    if status in ACTIVE or status == "SUCCEEDED":
        return SubmitResult(request.submission_id, str(status), created=False)
    if status in ("FAILED", "STOPPED"):
        raise SubmissionConflictError(
            f"job {request.submission_id} already ended {status}; resubmit with the next "
            "attempt number (training resumes from the last complete checkpoint)"
        )
    try:
        client.submit_job(
            entrypoint=request.entrypoint,
            submission_id=request.submission_id,
            runtime_env=request.runtime_env,
            metadata=request.metadata,
            entrypoint_num_cpus=request.entrypoint_num_cpus,
        )
    except RuntimeError as exc:
        if "413" in str(exc) or "request body size" in str(exc).lower():
            raise PackageTooLargeError(
                f"Ray refused the job's code package ({str(exc).splitlines()[0][:160]}): the "
                f"checkout {request.runtime_env.get('working_dir')} minus git-ignored files is "
                "over the Jobs API's upload "
                "limit. Move large files out of it or ignore them in git (.gitignore or "
                ".git/info/exclude); `git status --ignored` shows what ships."
            ) from exc
        if "already exists" not in str(exc):
            raise
    return SubmitResult(
        request.submission_id, str(get_status(client, request.submission_id)), created=True
    )


def entrypoint(spec_path: str, run_key: str, backend: str, workdir: str) -> str:
    import shlex

    return " ".join(
        shlex.quote(part)
        for part in (
            "python",
            "-m",
            "training.jobs.entry",
            "--spec",
            spec_path,
            "--run-key",
            run_key,
            "--backend",
            backend,
            "--workdir",
            workdir,
        )
    )
