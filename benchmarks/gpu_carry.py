"""Carry the GPU run's offline bundle to the device machine in parts that each fit one call.

The device tool copies the working tree plus the paths a call names in `carry`, 64 MiB in
all, and a warm machine keeps what earlier calls left in /tmp. The bundle (the packages
`gpu_bundle.sh` builds and the CPU loop's SFT checkpoint) is far larger, so it travels as
numbered parts, one per call, each checked here against what the call will really send
(the working tree as git sees it, the manifest, the part). On the machine, `status` says
which parts have landed, `verify` checks every part's SHA-256 before anything is unpacked,
and `digest` names the bundle, so a rerun on a warm machine skips an installed one.

Subcommands (stdlib only until `export-model`, so they run on the bare device image):
  export-model --run-dir RUN --out DIR   the CPU loop's `RUN/sft/final` as DIR/sft_model
  pack --site-archive F --model-dir D --dest .gpu_carry   compress the model, join it to the
                                          packages, split, manifest, plan
  plan --dest .gpu_carry                  the call sequence for parts already packed
  status|verify|digest|parts --dir DIR    on the device machine
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
CALL_LIMIT_BYTES = 64 * MIB
"""What one device call may carry: the working tree and the carried paths together."""
HEADROOM_BYTES = 2 * MIB
"""Room left in each call for files others add to the working tree before it is made."""
MANIFEST = "manifest.json"
BUNDLE = "bundle.tar.xz"


@dataclass(frozen=True)
class Part:
    name: str
    bytes: int
    sha256: str


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(4 * MIB):
            digest.update(chunk)
    return digest.hexdigest()


def split_file(archive: Path, dest: Path, part_bytes: int) -> list[Part]:
    """`archive` as `dest/<archive name>.NN` parts of at most `part_bytes` each."""
    if part_bytes <= 0:
        raise ValueError("part size must be positive")
    for old in dest.glob(f"{archive.name}.*"):
        old.unlink()
    parts: list[Part] = []
    with archive.open("rb") as source:
        while chunk := source.read(part_bytes):
            path = dest / f"{archive.name}.{len(parts):02d}"
            path.write_bytes(chunk)
            parts.append(Part(path.name, len(chunk), hashlib.sha256(chunk).hexdigest()))
    return parts


def join_archives(archives: list[Path], target: Path) -> Path:
    """The packages' and the model's xz tarballs back to back in one file, split as one, so
    no part is left half empty: `xz -d` reads concatenated streams as one, and `tar -x -i`
    reads on past the first archive's end (benchmarks/gpu_smollm2_grpo.sh)."""
    with target.open("wb") as sink:
        for archive in archives:
            with archive.open("rb") as source:
                while chunk := source.read(4 * MIB):
                    sink.write(chunk)
    return target


def bundle_digest(parts: list[Part]) -> str:
    """One name for the whole bundle: the same parts give the same digest."""
    material = "".join(f"{p.name}:{p.sha256}\n" for p in parts)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def write_manifest(dest: Path, parts: list[Part]) -> dict[str, Any]:
    manifest = {
        "digest": bundle_digest(parts),
        "parts": [p.__dict__ for p in parts],
        "bytes": sum(p.bytes for p in parts),
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def read_manifest(directory: Path) -> tuple[str, list[Part]]:
    data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    return str(data["digest"]), [Part(**p) for p in data["parts"]]


def working_tree_bytes(root: Path) -> int:
    """What every call sends besides its carried paths: tracked files and untracked files
    that git does not ignore (the device tool's own rule)."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for name in listed.split(b"\0"):
        path = root / os.fsdecode(name)
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def call_plan(dest: Path, root: Path) -> list[dict[str, Any]]:
    """One call per part, the last one running the script; each call's size checked."""
    _, parts = read_manifest(dest)
    tree = working_tree_bytes(root)
    manifest_bytes = (dest / MANIFEST).stat().st_size
    relative = dest.resolve().relative_to(root.resolve())
    calls = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        sends = tree + manifest_bytes + part.bytes
        calls.append(
            {
                "call": index + 1,
                "carry": [str(relative / MANIFEST), str(relative / part.name)],
                "command": "bash benchmarks/gpu_smollm2_grpo.sh " + ("run" if last else "stash"),
                "sends_mib": round(sends / MIB, 1),
                "fits": sends + HEADROOM_BYTES <= CALL_LIMIT_BYTES,
            }
        )
    return calls


def max_part_bytes(root: Path, manifest_allowance: int = 4096) -> int:
    """The largest part that still fits one call beside today's working tree."""
    return CALL_LIMIT_BYTES - HEADROOM_BYTES - working_tree_bytes(root) - manifest_allowance


def compress_dir(directory: Path, archive: Path) -> Path:
    """`directory` (its own name kept as the top folder) as an xz tarball, all cores."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with archive.open("wb") as sink:
        tar = subprocess.Popen(
            ["tar", "-C", str(directory.parent), "-cf", "-", directory.name],
            stdout=subprocess.PIPE,
        )
        assert tar.stdout is not None
        xz = subprocess.run(["xz", "-T0", "-6"], stdin=tar.stdout, stdout=sink, check=False)
        tar.stdout.close()
        if tar.wait() != 0 or xz.returncode != 0:
            raise RuntimeError(f"compressing {directory} failed")
    return archive


def export_sft(run_dir: Path, out: Path) -> Path:
    """The CPU loop's finished warm start (`sft/final` with its COMPLETE marker) as a plain
    model directory, through the loop's own export (no optimizer state)."""
    from training.cpu_backend.export import export_model
    from training.cpu_backend.sft import FINAL_DIR

    final = run_dir / "sft" / FINAL_DIR
    if not (final / "COMPLETE").is_file():
        raise SystemExit(f"{final} has no COMPLETE marker: the SFT warm start did not finish")
    target = export_model(final, out / "sft_model")
    missing = [
        n
        for n in ("config.json", "model.safetensors", "tokenizer.json")
        if not (target / n).is_file()
    ]
    if missing:
        raise SystemExit(f"{final} lacks {', '.join(missing)}")
    to_bfloat16(target)
    return target


def to_bfloat16(model_dir: Path) -> bool:
    """Float32 weights as bfloat16, rounded to nearest: a CPU without native bf16 trains and
    saves in float32 (cpu_backend/compute_dtype.py), which doubles what has to be carried.
    SmolLM2 ships in bf16 and verl's actor computes in bf16, and the device run both starts
    from and evaluates this one directory, so before and after share the same start.
    Returns whether anything changed."""
    import torch
    from safetensors.torch import load_file, save_file

    path = model_dir / "model.safetensors"
    tensors = load_file(path)
    if not any(t.dtype == torch.float32 for t in tensors.values()):
        return False
    cast = {k: t.to(torch.bfloat16) if t.dtype == torch.float32 else t for k, t in tensors.items()}
    scratch = path.with_name(path.name + ".tmp")
    save_file(cast, scratch, metadata={"format": "pt"})
    os.replace(scratch, path)
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = "bfloat16"
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return True


def parts_status(directory: Path) -> tuple[list[str], list[str]]:
    """(present, missing) part names by size; `verify` checks their contents."""
    _, parts = read_manifest(directory)
    present: list[str] = []
    missing: list[str] = []
    for part in parts:
        path = directory / part.name
        ok = path.is_file() and path.stat().st_size == part.bytes
        (present if ok else missing).append(part.name)
    return present, missing


def corrupt_parts(directory: Path) -> list[str]:
    _, parts = read_manifest(directory)
    return [
        p.name
        for p in parts
        if not (directory / p.name).is_file() or file_sha256(directory / p.name) != p.sha256
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export-model")
    export.add_argument("--run-dir", type=Path, required=True)
    export.add_argument("--out", type=Path, required=True)
    pack = sub.add_parser("pack")
    pack.add_argument("--site-archive", type=Path, required=True)
    pack.add_argument("--model-dir", type=Path, required=True)
    pack.add_argument("--dest", type=Path, default=Path(".gpu_carry"))
    plan = sub.add_parser("plan")
    plan.add_argument("--dest", type=Path, default=Path(".gpu_carry"))
    for name in ("status", "verify", "digest", "parts"):
        sub.add_parser(name).add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    root = Path.cwd()

    if args.command == "export-model":
        print(export_sft(args.run_dir, args.out))
        return 0
    if args.command == "pack":
        args.dest.mkdir(parents=True, exist_ok=True)
        model_archive = compress_dir(args.model_dir, args.dest / "model.whole.tar.xz")
        bundle = join_archives([args.site_archive, model_archive], args.dest / BUNDLE)
        model_archive.unlink()
        parts = split_file(bundle, args.dest, max_part_bytes(root))
        bundle.unlink()
        write_manifest(args.dest, parts)
    if args.command in ("pack", "plan"):
        calls = call_plan(args.dest, root)
        print(json.dumps(calls, indent=2))
        print(f"{len(calls)} calls; every call fits: {all(c['fits'] for c in calls)}")
        return 0 if all(c["fits"] for c in calls) else 1
    directory: Path = args.dir
    if not (directory / MANIFEST).is_file():
        print(f"no {MANIFEST} in {directory}: no part has landed yet", file=sys.stderr)
        return 1
    if args.command == "digest":
        print(read_manifest(directory)[0])
        return 0
    if args.command == "parts":  # in order, this bundle's only: a folder may hold older parts
        print("\n".join(str(directory / p.name) for p in read_manifest(directory)[1]))
        return 0
    if args.command == "status":
        present, missing = parts_status(directory)
        print(f"parts here: {len(present)} of {len(present) + len(missing)}; missing: {missing}")
        return 0
    bad = corrupt_parts(directory)
    if bad:
        print(f"missing or corrupt parts: {bad}", file=sys.stderr)
        return 1
    print("every part present and intact")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
