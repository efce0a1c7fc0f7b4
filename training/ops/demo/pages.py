"""What the demo shows a person: the pages it wrote, checked to load nothing from the network,
and screenshots of them and of Airflow's grid view under `<workdir>/screenshots`.

Why screenshots: a page that needs a CDN renders blank on an offline machine, and the HTML
alone does not show that; the picture does, and it is what a reviewer of a run looks at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from training.ops.demo.screenshots import screenshot
from training.ops.pages.offline import external_references_in_file


@dataclass(frozen=True)
class PageShot:
    name: str
    source: str
    external_refs: int | None
    """None for pages served by Airflow (not files this pipeline wrote)."""
    png: Path | None


def check_and_shoot(
    pages: dict[str, Path],
    out: Path,
    airflow: tuple[str, str, list[str]] | None,
    on_line: Callable[[str], None],
) -> list[PageShot]:
    """Each written page: its external references (must be 0) and a screenshot; then the
    Airflow grid of each DAG (`airflow` = (api url, JWT for the `_token` cookie, dag ids))."""
    out.mkdir(parents=True, exist_ok=True)
    shots: list[PageShot] = []
    for name, path in pages.items():
        if not path.is_file():
            on_line(f"  {name}: not written ({path})")
            continue
        refs = external_references_in_file(path)
        png = screenshot(path, out / f"{name}.png")
        verdict = "renders offline" if not refs else f"{len(refs)} external references"
        on_line(f"  {name}: {verdict}; screenshot {png or 'skipped (no chromium)'}")
        shots.append(PageShot(name, str(path), len(refs), png))
    if airflow is not None:
        base, token, dag_ids = airflow
        for dag_id in dag_ids:
            png = screenshot(
                f"{base}/dags/{dag_id}", out / f"airflow_{dag_id}.png", cookies={"_token": token}
            )
            on_line(f"  Airflow grid {dag_id}: screenshot {png or 'skipped (no chromium)'}")
            shots.append(PageShot(f"airflow_{dag_id}", f"{base}/dags/{dag_id}", None, png))
    return shots
