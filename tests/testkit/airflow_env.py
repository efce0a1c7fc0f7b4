"""Point Airflow at the repo's dags/ and plugins/ with a throwaway home (import before airflow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def configure() -> None:
    os.environ.setdefault("AIRFLOW_HOME", str(REPO / ".airflow-test"))
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    for folder in ("dags", "plugins"):
        if str(REPO / folder) not in sys.path:
            sys.path.insert(0, str(REPO / folder))


def migrate() -> Path:
    home = Path(os.environ["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return home
