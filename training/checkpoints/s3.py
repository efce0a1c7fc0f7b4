"""Mirror checkpoint steps to S3 (boto3, multipart, verified) and bring the latest back.

Upload order is the durability contract: every file, each verified by size (and by MD5
against the ETag when it went up in one part), then the step's marker, then the run's
tracker. A reader trusts only steps with a marker, so an upload killed midway is invisible.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.checkpoints.layout import (
    MARKER,
    TRACKER,
    StepFiles,
    mark_complete,
    parse_step,
    scan_step,
    step_dir_name,
    write_tracker,
)

logger = logging.getLogger(__name__)
MULTIPART_THRESHOLD = 64 * 1024 * 1024
Progress = Callable[[str, int], None]


class CheckpointStoreError(RuntimeError):
    """An upload could not be verified, or the store is unreachable."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        if not uri.startswith("s3://") or len(uri) <= 5:
            raise ValueError(f"expected s3://bucket/prefix, got {uri!r}")
        bucket, _, prefix = uri[5:].partition("/")
        if not bucket:
            raise ValueError(f"expected s3://bucket/prefix, got {uri!r}")
        return cls(bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)


def make_client(endpoint_url: str | None = None) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url)


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointStore:
    def __init__(
        self, client: Any, uri: str, multipart_threshold: int = MULTIPART_THRESHOLD
    ) -> None:
        self.client = client
        self.location = S3Location.parse(uri)
        self.multipart_threshold = multipart_threshold

    def _transfer_config(self) -> Any:
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=max(self.multipart_threshold, 5 * 1024 * 1024),
        )

    def upload_step(self, step_dir: Path, progress: Progress | None = None) -> StepFiles:
        """Upload one `global_step_N` directory; the marker goes last."""
        files = scan_step(step_dir)
        name = step_dir_name(files.step)
        for rel, size in files.files.items():
            key = self.location.key(name, rel)
            local = step_dir / rel
            self.client.upload_file(
                str(local), self.location.bucket, key, Config=self._transfer_config()
            )
            self._verify(key, local, size)
            if progress is not None:
                progress(rel, size)
        marker = files.marker_json({"uploaded": True})
        self.client.put_object(
            Bucket=self.location.bucket, Key=self.location.key(name, MARKER), Body=marker.encode()
        )
        self.client.put_object(
            Bucket=self.location.bucket,
            Key=self.location.key(TRACKER),
            Body=str(files.step).encode(),
        )
        logger.info(
            "checkpoint step %d uploaded to s3://%s/%s (%d files)",
            files.step,
            self.location.bucket,
            self.location.key(name),
            len(files.files),
        )
        return files

    def _verify(self, key: str, local: Path, size: int) -> None:
        head = self.client.head_object(Bucket=self.location.bucket, Key=key)
        if int(head["ContentLength"]) != size:
            raise CheckpointStoreError(f"size mismatch after upload of {key}")
        etag = str(head.get("ETag", "")).strip('"')
        if "-" not in etag and etag and etag != _md5(local):
            raise CheckpointStoreError(f"checksum mismatch after upload of {key}")

    def _list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.location.bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return keys

    def _steps(self) -> tuple[dict[int, list[str]], set[int]]:
        """All step prefixes in the store, and those with a marker."""
        base = self.location.key("")
        keys = self._list(f"{base}/" if base else "")
        steps: dict[int, list[str]] = {}
        complete: set[int] = set()
        for key in keys:
            rel = key[len(base) + 1 :] if base else key
            head, _, rest = rel.partition("/")
            step = parse_step(head)
            if step is None:
                continue
            steps.setdefault(step, []).append(key)
            if rest == MARKER:
                complete.add(step)
        return steps, complete

    def complete_steps(self) -> list[int]:
        return sorted(self._steps()[1])

    def prune(self, keep: int) -> list[int]:
        """Keep the newest `keep` complete steps; delete older ones and any incomplete step
        older than the newest complete one (an interrupted upload, also from before a
        restart). Returns the steps deleted."""
        steps, complete = self._steps()
        kept = set(sorted(complete)[-keep:]) if keep > 0 else set()
        newest = max(complete) if complete else None
        doomed = [
            s
            for s in steps
            if s not in kept and (s in complete or (newest is not None and s < newest))
        ]
        for step in doomed:
            for start in range(0, len(steps[step]), 1000):
                chunk = steps[step][start : start + 1000]
                self.client.delete_objects(
                    Bucket=self.location.bucket, Delete={"Objects": [{"Key": k} for k in chunk]}
                )
        return sorted(doomed)

    def download_latest(self, run_dir: Path) -> int | None:
        """Bring the newest complete step to `run_dir` (verified), write verl's tracker and
        our marker locally; return the step, or None when the store holds no complete step."""
        complete = self.complete_steps()
        if not complete:
            return None
        step = complete[-1]
        name = step_dir_name(step)
        marker = self.client.get_object(
            Bucket=self.location.bucket, Key=self.location.key(name, MARKER)
        )
        recorded: dict[str, int] = json.loads(marker["Body"].read())["files"]
        target = run_dir / name
        for rel, size in recorded.items():
            local = target / rel
            local.parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(
                self.location.bucket, self.location.key(name, rel), str(local)
            )
            if local.stat().st_size != size:
                raise CheckpointStoreError(f"size mismatch after download of {rel}")
        mark_complete(target, {"downloaded": True})
        write_tracker(run_dir, step)
        return step
