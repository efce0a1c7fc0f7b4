"""Read a pack file: bounded, safe YAML into a `PackSpec`, with errors that name file and line.

Why not plain `yaml.safe_load`: a pack may come from anyone, and safe_load is safe against
code execution only. It still expands an alias bomb into an object graph whose traversal is
exponential, recurses until Python's stack gives out on deep nesting, and keeps the last of
two duplicate keys without a word (a duplicate template id would silently lose a phrasing).
So: a size cap before parsing, no aliases, a nesting and node cap while composing, duplicate
keys refused, and the composed node tree kept so a pydantic error's location becomes a line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from training.data.packs.model import PackSpec
from training.data.packs.pool_files import resolve_pool_files

BUILTIN_DIR = Path(__file__).with_name("builtin")
MAX_PACK_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_NODES = 100_000


def builtin_packs() -> dict[str, Path]:
    """The packs that ship with the project, by name (`time`, `memory`, `toolrl`)."""
    return {p.stem: p for p in sorted(BUILTIN_DIR.glob("*.yaml"))}


def resolve_pack(text: str) -> Path:
    """A path as given, else a shipped pack's name (the CLI and `PipelineConfig.pack` accept
    both)."""
    path = Path(text)
    if path.exists() or text not in builtin_packs():
        return path
    return builtin_packs()[text]


class PackError(ValueError):
    """A pack that cannot be used; `problems` holds one line per problem, each naming where."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader without aliases, with depth/node caps and duplicate-key detection."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def _event(self) -> Any:
        return self.peek_event()  # type: ignore[no-untyped-call]

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self._event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in a pack", event.start_mark
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"the pack has more than {MAX_NODES} YAML nodes",
                self._event().start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nesting deeper than {MAX_DEPTH} levels",
                    self._event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                ) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class LoadedPack:
    """A validated pack and where it came from (for messages that name a line)."""

    spec: PackSpec
    path: Path
    text: str
    root: Any = None
    """The composed YAML node tree."""
    data_files: dict[str, str] = field(default_factory=dict)
    """JSON files that pools were read from (name -> sha256): the rows depend on them."""

    def line_of(self, location: Sequence[str | int]) -> int | None:
        return line_of(self.root, location)

    def where(self, location: Sequence[str | int]) -> str:
        line = self.line_of(location)
        return f"{self.path}:{line}" if line else str(self.path)


def line_of(root: Any, location: Sequence[str | int]) -> int | None:
    """The 1-based line of the node at `location` (keys and list indices), or of the
    deepest node on the way that exists."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in location:
        child = None
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if str(key_node.value) == str(part):
                    child = value_node
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            child = node.value[part]
        if child is None:
            break
        node = child
        line = node.start_mark.line + 1
    return line


def _location_text(location: Sequence[str | int], data: Any) -> str:
    """`intents[3] (current_time).phrasings.en` for an error location."""
    parts: list[str] = []
    node = data
    for part in location:
        if isinstance(part, int):
            label = f"[{part}]"
            if isinstance(node, list) and 0 <= part < len(node):
                node = node[part]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    label += f" ({node['name']})"
            else:
                node = None
            parts.append(label)
        else:
            parts.append(f".{part}" if parts else str(part))
            node = node.get(part) if isinstance(node, dict) else None
    return "".join(parts)


def _without_tags(location: list[str | int]) -> list[str | int]:
    """The location without the union tags pydantic inserts after a step's index
    (`steps, 0, parallel, parallel, 1` -> `steps, 0, parallel, 1`)."""
    kept: list[str | int] = []
    for position, part in enumerate(location):
        is_tag = (
            part in ("call", "parallel")
            and position >= 2
            and isinstance(location[position - 1], int)
            and location[position - 2] == "steps"
        )
        if not is_tag:
            kept.append(part)
    return kept


def parse_pack_text(text: str, path: Path) -> LoadedPack:
    """Parse and validate pack text; PackError (naming file, line and field) on anything."""
    if len(text.encode("utf-8", errors="replace")) > MAX_PACK_BYTES:
        raise PackError([f"{path}: the pack is over {MAX_PACK_BYTES // 1024} KiB; split it"])
    loader = _BoundedLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PackError([f"{path}{line}: not a usable YAML pack: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise PackError([f"{path}: not a usable YAML pack: {exc}"]) from None
    except RecursionError:
        raise PackError([f"{path}: nesting too deep"]) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise PackError([f"{path}: a pack is a mapping with `pack:`, `server:` and `intents:`"])
    try:
        spec = PackSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            location = _without_tags([p for p in error["loc"] if isinstance(p, str | int)])
            number = line_of(root, location)
            where = f"{path}:{number}" if number else str(path)
            problems.append(f"{where}: {_location_text(location, data)}: {error['msg']}")
        raise PackError(problems) from None
    resolved, pool_problems = resolve_pool_files(spec, path.parent)
    if pool_problems:
        raise PackError(
            [
                f"{path}:{line_of(root, ['pools', name])}: pools.{name}: {message}"
                for name, message in pool_problems
            ]
        )
    if resolved.files:
        spec = spec.model_copy(update={"pools": resolved.pools})
    return LoadedPack(spec, path, text, root, resolved.files)


def load_pack(path: Path) -> LoadedPack:
    """Read and validate a pack file (size-capped before it is read in full)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PackError([f"{path}: cannot read the pack: {exc.strerror or exc}"]) from None
    if size > MAX_PACK_BYTES:
        raise PackError([f"{path}: the pack is {size} bytes, over {MAX_PACK_BYTES // 1024} KiB"])
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PackError([f"{path}: the pack is not UTF-8 text"]) from None
    except OSError as exc:
        raise PackError([f"{path}: cannot read the pack: {exc.strerror or exc}"]) from None
    return parse_pack_text(text, path)
