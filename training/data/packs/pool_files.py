"""Pools read from shipped JSON files (`pool: {file: world.json, path: cities}`), safely.

Why a file at all: the built-in tools answer from `serving/data/world.json` (cities,
currencies, products, the phrasebook); a pack that copied those lists would drift from what
the server answers. Why so strict: a pack may come from anyone, so the file is a plain name
(the model refuses `/` and `..`), looked up only in the pack's own folder and the project's
shipped data folder, resolved (symlinks too) and refused unless it stays inside that folder;
the file is size-capped before it is read, and the pool it yields is capped like an inline
one. Resolution happens once, at load time, so generation, checks and the manifest see plain
lists, and the manifest records each file's digest (the rows depend on its content).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.data.packs.model import PackSpec
from training.data.packs.slot_model import PoolFile
from training.data.packs.spec_types import MAX_VALUES

PROJECT_DATA_DIR = Path(__file__).resolve().parents[3] / "serving" / "data"
"""The project's shipped data (`serving/data`): what the built-in tools answer from."""
MAX_POOL_FILE_BYTES = 8 * 1024 * 1024


class PoolFileError(ValueError):
    """A file pool that cannot be read; the message names the pool, file and reason."""


@dataclass(frozen=True)
class ResolvedPools:
    pools: dict[str, Any]
    """Every pool as values (file pools replaced by their lists)."""
    files: dict[str, str]
    """File name -> sha256 of its bytes, for the manifest."""


def data_dirs(pack_dir: Path) -> list[Path]:
    """Where a file pool is looked up, in order: beside the pack, then the project's data."""
    return [pack_dir.resolve(), PROJECT_DATA_DIR]


def find_file(name: str, roots: Sequence[Path]) -> Path:
    """The file `name` inside one of `roots`; PoolFileError if absent or if it resolves
    outside its root (a symlink out of the folder)."""
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise PoolFileError(f"file {name!r} is not a plain file name")
    for root in roots:
        candidate = root / name
        if not candidate.exists():
            continue
        resolved = candidate.resolve()
        if not resolved.is_relative_to(root.resolve()):
            raise PoolFileError(f"file {name!r} resolves outside {root} ({resolved})")
        if not resolved.is_file():
            raise PoolFileError(f"{resolved} is not a file")
        return resolved
    raise PoolFileError(f"no file {name!r} in {' or '.join(str(r) for r in roots)}")


def _walk(document: Any, spec: PoolFile) -> Any:
    node = document
    for depth, key in enumerate(spec.path.split(".")):
        if not isinstance(node, dict) or key not in node:
            at = ".".join(spec.path.split(".")[:depth]) or "the top level"
            keys = ", ".join(sorted(node)[:12]) if isinstance(node, dict) else ""
            raise PoolFileError(
                f"{spec.file} has no key {key!r} at {at}" + (f" (it has: {keys})" if keys else "")
            )
        node = node[key]
    return node


def read_pool_file(spec: PoolFile, roots: Sequence[Path]) -> tuple[list[Any], str]:
    """The pool's values and the file's sha256; PoolFileError naming what is wrong."""
    path = find_file(spec.file, roots)
    size = path.stat().st_size
    if size > MAX_POOL_FILE_BYTES:
        raise PoolFileError(f"{spec.file} is {size} bytes, over {MAX_POOL_FILE_BYTES} bytes")
    raw = path.read_bytes()
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise PoolFileError(f"{spec.file} is not JSON text: {str(exc)[:120]}") from None
    node = _walk(document, spec)
    if isinstance(node, dict):
        if spec.items is None:
            raise PoolFileError(
                f"{spec.file}:{spec.path} is a mapping; say `items: keys` or `items: values`"
            )
        values = list(node.keys()) if spec.items == "keys" else list(node.values())
    elif isinstance(node, list):
        if spec.items is not None:
            raise PoolFileError(f"{spec.file}:{spec.path} is a list; `items:` is for mappings")
        values = node
    else:
        raise PoolFileError(
            f"{spec.file}:{spec.path} is a {type(node).__name__}, not a list or mapping"
        )
    if not values:
        raise PoolFileError(f"{spec.file}:{spec.path} is empty")
    if len(values) > MAX_VALUES:
        raise PoolFileError(f"{spec.file}:{spec.path} holds more than {MAX_VALUES} values")
    return values, hashlib.sha256(raw).hexdigest()


def resolve_pool_files(
    spec: PackSpec, pack_dir: Path
) -> tuple[ResolvedPools, list[tuple[str, str]]]:
    """Every pool as values, and the problems as (pool name, message naming the file)."""
    roots = data_dirs(pack_dir)
    pools: dict[str, Any] = {}
    files: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for name, pool in spec.pools.items():
        if not isinstance(pool, PoolFile):
            pools[name] = pool
            continue
        try:
            values, digest = read_pool_file(pool, roots)
        except PoolFileError as exc:
            problems.append((name, str(exc)))
            continue
        except OSError as exc:
            problems.append((name, f"cannot read {pool.file}: {exc.strerror or exc}"))
            continue
        pools[name] = values
        files[pool.file] = digest
    return ResolvedPools(pools, files), problems
