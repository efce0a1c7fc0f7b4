"""Ray token authentication for the clusters this project starts (the demo's head, the test
heads) and the environment that turns it on.

Why always on: the Jobs API runs arbitrary code for whoever reaches it (the exposure that
was exploited in the wild as CVE-2023-48022), and Ray 2.52+ ships static-token auth for the
dashboard, the Jobs API and its internal services. A head started with `ray_auth_env` refuses
any request without the token; the job drivers it starts inherit the token from its
environment, so nothing puts it in a job's runtime_env.
"""

from __future__ import annotations

import secrets

AUTH_MODE_VAR = "RAY_AUTH_MODE"
TOKEN_VAR = "RAY_AUTH_TOKEN"


def new_token() -> str:
    """A fresh cluster token (URL-safe, so it can sit in a connection URI's password)."""
    return secrets.token_hex(32)


def ray_auth_env(token: str) -> dict[str, str]:
    """What `ray start --head` needs in its environment to require `token`."""
    if not token or any(ch.isspace() for ch in token):
        raise ValueError("a Ray auth token must be non-empty and contain no whitespace")
    return {AUTH_MODE_VAR: "token", TOKEN_VAR: token}
