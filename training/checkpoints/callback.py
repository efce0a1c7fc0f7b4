"""verl's `trainer.checkpoint_callback_class` hook: mark each saved step complete locally,
mirror it to S3 and prune. Runs on the trainer driver after every save; an exception here
aborts training, which is what a failed durable save should do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from training.checkpoints.layout import mark_complete
from training.checkpoints.s3 import CheckpointStore, make_client

URI_ENV = "TOOLRL_CHECKPOINT_S3_URI"
KEEP_ENV = "TOOLRL_CHECKPOINT_KEEP"


class CheckpointUploader(CheckpointCallback):
    def __init__(self, config: Any = None) -> None:
        super().__init__(config=config)  # type: ignore[no-untyped-call]
        self.uri = os.environ.get(URI_ENV)
        self.keep = int(os.environ.get(KEEP_ENV, "3"))
        self.store = (
            CheckpointStore(make_client(os.environ.get("MLFLOW_S3_ENDPOINT_URL")), self.uri)
            if self.uri
            else None
        )

    def on_save(
        self,
        trainer: Any,
        global_step: int,
        checkpoint_dir: str,
        async_save: bool = False,
        **kwargs: Any,
    ) -> None:
        if async_save:
            return  # files may still be in flight; the next synchronous save covers it
        step_dir = Path(checkpoint_dir)
        mark_complete(step_dir, {"step": global_step})
        if self.store is not None:
            self.store.upload_step(step_dir)
            self.store.prune(self.keep)
