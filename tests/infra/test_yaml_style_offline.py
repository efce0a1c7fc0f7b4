"""Every key of the YAML under infra/ carries a comment (the project's style for deployment
files): a platform team edits these files without reading the code, so each setting says what
it does where it is set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from infra_files import INFRA

YAML_FILES = sorted(INFRA.rglob("*.yaml"))  # pathlib globs include dotfiles (.hadolint.yaml)
KEY = re.compile(r"""^\s*(?:- )?("[^"]+"|'[^']+'|[\w.\-/]+):(\s|$)""")
BLOCK_SCALAR = re.compile(r"(:|^\s*-)\s*[|>][-+]?\s*(#.*)?$")


def uncommented_keys(path: Path) -> list[str]:
    """Lines that open a mapping key without a `#` comment; block scalars' text is skipped."""
    problems = []
    block_indent: int | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if stripped and indent <= block_indent:
                block_indent = None
            else:
                continue
        if not stripped or stripped.startswith("#") or stripped == "---":
            continue
        if KEY.match(line) and "#" not in line:
            problems.append(f"{path.name}:{number}: {stripped}")
        if BLOCK_SCALAR.search(line):
            block_indent = indent
    return problems


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.relative_to(INFRA).as_posix())
def test_every_infra_yaml_key_has_a_comment_offline(path: Path) -> None:
    assert not uncommented_keys(path)


def test_comment_check_flags_a_bare_key_offline(tmp_path: Path) -> None:
    sample = tmp_path / "sample.yaml"
    sample.write_text("a: 1  # fine\nb: 2\nc: |  # text follows\n  d: not a key\n", "utf-8")
    assert uncommented_keys(sample) == ["sample.yaml:2: b: 2"]


def test_yaml_style_check_covers_every_infra_yaml_file_offline() -> None:
    names = {p.relative_to(INFRA).as_posix() for p in YAML_FILES}
    assert {"docker/.hadolint.yaml", "compose/compose.yaml", "helm/airflow-values.yaml"} <= names
    assert len([n for n in names if n.startswith("k8s/")]) >= 5
