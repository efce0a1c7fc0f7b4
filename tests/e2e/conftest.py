from __future__ import annotations

from testkit.airflow_env import configure

configure()
