"""Write a verl actor checkpoint the way verl's FSDP engine does, on CPU: the model wrapped
with FSDP2 (`fully_shard`) over a one-rank gloo group and saved by verl's own
`FSDPCheckpointManager`. Runs as its own process (a process group per test run).

    python tests/testkit/verl_fsdp_save.py MODEL_DIR STEP_DIR PORT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def save(model_dir: Path, step_dir: Path, port: int) -> None:
    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        contents = ["model", "optimizer", "extra"]
        manager = FSDPCheckpointManager(
            model=model,
            optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
            lr_scheduler=None,
            processing_class=AutoTokenizer.from_pretrained(model_dir),
            checkpoint_config=OmegaConf.create(
                {"save_contents": contents, "load_contents": contents}
            ),
        )
        manager.save_checkpoint(str(step_dir / "actor"), global_step=0)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    save(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
