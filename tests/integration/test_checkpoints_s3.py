"""Checkpoint mirroring against an S3-compatible emulator server on loopback (moto's
`ThreadedMotoServer`: real HTTP, boto3's real client and multipart protocol; not AWS)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serving.runtime.ports import free_port
from training.checkpoints.layout import (
    TRACKER,
    is_complete,
    latest_complete_step,
    mark_complete,
    repair_tracker,
    step_dir_name,
)
from training.checkpoints.s3 import CheckpointStore, S3Location, make_client


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's emulator's dummy credentials exist only while this module's tests run: set in a
    MonkeyPatch context, so no later test (or code under test) sees them."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()


@pytest.fixture
def store(s3_endpoint: str, request: pytest.FixtureRequest) -> CheckpointStore:
    client = make_client(s3_endpoint)
    bucket = f"ckpt-{request.node.name.replace('_', '-')[:40].lower()}"
    client.create_bucket(Bucket=bucket)
    return CheckpointStore(client, f"s3://{bucket}/runs/demo", multipart_threshold=5 * 1024**2)


def make_step(run_dir: Path, step: int, big: bool = False) -> Path:
    step_dir = run_dir / step_dir_name(step)
    (step_dir / "actor").mkdir(parents=True)
    (step_dir / "actor" / "model.pt").write_bytes(os.urandom(11 * 1024**2 if big else 4096))
    (step_dir / "actor" / "optim.pt").write_bytes(os.urandom(2048))
    (step_dir / "data.pt").write_bytes(f"position={step}".encode())
    return step_dir


def test_upload_then_download_latest_round_trips(store: CheckpointStore, tmp_path: Path) -> None:
    run = tmp_path / "run"
    store.upload_step(make_step(run, 10))
    store.upload_step(make_step(run, 20, big=True))  # multipart upload, verified by size
    assert store.complete_steps() == [10, 20]

    restored = tmp_path / "restored"
    assert store.download_latest(restored) == 20
    assert (restored / TRACKER).read_text() == "20"
    for rel in ("actor/model.pt", "actor/optim.pt", "data.pt"):
        assert (restored / "global_step_20" / rel).read_bytes() == (
            run / "global_step_20" / rel
        ).read_bytes()
    assert is_complete(restored / "global_step_20")


def test_interrupted_upload_never_becomes_latest(store: CheckpointStore, tmp_path: Path) -> None:
    run = tmp_path / "run"
    store.upload_step(make_step(run, 10))

    def die_after_first_file(rel: str, size: int) -> None:
        raise KeyboardInterrupt("killed mid-upload")

    with pytest.raises(KeyboardInterrupt):
        store.upload_step(make_step(run, 20), progress=die_after_first_file)
    assert store.complete_steps() == [10]
    assert store.download_latest(tmp_path / "restored") == 10


def test_prune_keeps_newest_and_removes_stale_partials(
    store: CheckpointStore, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    for step in (10, 20):
        store.upload_step(make_step(run, step))

    def die(rel: str, size: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # a partial from before a restart
        store.upload_step(make_step(run, 30), progress=die)
    store.upload_step(make_step(run, 40))
    deleted = store.prune(keep=2)
    assert deleted == [10, 30]
    assert store.complete_steps() == [20, 40]
    remaining = store._list(store.location.key(""))
    assert not any("global_step_30" in key or "global_step_10" in key for key in remaining)


def test_empty_store_gives_no_checkpoint(store: CheckpointStore, tmp_path: Path) -> None:
    assert store.download_latest(tmp_path / "nothing") is None


def test_unreachable_store_raises_a_clear_error(tmp_path: Path) -> None:
    from botocore.exceptions import EndpointConnectionError

    store = CheckpointStore(make_client(f"http://127.0.0.1:{free_port()}"), "s3://b/p")
    with pytest.raises(EndpointConnectionError):
        store.complete_steps()


@pytest.mark.parametrize("uri", ["", "s3://", "gs://bucket/x", "bucket/prefix"])
def test_bad_uris_are_rejected(uri: str) -> None:
    with pytest.raises(ValueError, match="expected s3://bucket/prefix"):
        S3Location.parse(uri)


def test_local_resume_rule_ignores_half_written_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    mark_complete(make_step(run, 5))
    mark_complete(make_step(run, 10))
    half = make_step(run, 15)  # died before its marker
    (run / TRACKER).write_text("15")  # verl's tracker already points at it
    assert latest_complete_step(run) == 10
    assert repair_tracker(run) == 10
    assert (run / TRACKER).read_text() == "10"
    mark_complete(half)
    (half / "data.pt").write_bytes(b"truncated")  # a file changed after the marker
    assert not is_complete(half)
    assert latest_complete_step(run) == 10


def verl_built_callback(run: Path) -> Any:
    """The callback as verl's trainer builds it: from the class name a plan sets."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    from training.spec.overrides import CHECKPOINT_CALLBACK

    config = OmegaConf.create(
        {
            "trainer": {
                "checkpoint_callback_class": CHECKPOINT_CALLBACK,
                "default_local_dir": str(run),
            }
        }
    )
    return build_checkpoint_callback(config)


def test_verls_callback_marks_each_saved_step_without_s3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The H200 smoke run saved steps 1 and 2 with no callback set: no markers, so the final
    step read 0. With the callback every plan now sets, each save is marked as verl makes it."""
    monkeypatch.delenv("TOOLRL_CHECKPOINT_S3_URI", raising=False)
    run = tmp_path / "run"
    callback = verl_built_callback(run)
    for step in (1, 2):
        step_dir = make_step(run, step)
        (run / TRACKER).write_text(str(step))  # verl writes its tracker before the hook
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(step_dir))
    assert latest_complete_step(run) == 2
    assert repair_tracker(run) == 2


def test_verls_callback_skips_async_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLRL_CHECKPOINT_S3_URI", raising=False)
    run = tmp_path / "run"
    step_dir = make_step(run, 3)
    verl_built_callback(run).on_save(
        trainer=None, global_step=3, checkpoint_dir=str(step_dir), async_save=True
    )
    assert latest_complete_step(run) is None  # files may still be in flight


def test_verls_callback_mirrors_to_s3_and_prunes(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(s3_endpoint)
    client.create_bucket(Bucket="ckpt-callback")
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("TOOLRL_CHECKPOINT_S3_URI", "s3://ckpt-callback/runs/r1")
    monkeypatch.setenv("TOOLRL_CHECKPOINT_KEEP", "2")
    run = tmp_path / "run"
    callback = verl_built_callback(run)
    for step in (1, 2, 3):
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(make_step(run, step)))
    store = CheckpointStore(client, "s3://ckpt-callback/runs/r1")
    assert store.complete_steps() == [2, 3]
    assert latest_complete_step(run) == 3
