"""Write a verl actor checkpoint the way verl's FSDP engine does, on CPU: the model wrapped
with FSDP2 (`fully_shard`) over a one-rank gloo group, trained for one optimizer step (so
its weights differ from the base model's), and saved by verl's own `FSDPCheckpointManager`.
The trained weights are also written, gathered, to `STEP_DIR/trained_state.pt` so a test
can compare the merge against them. Runs as its own process (a process group per run).

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
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        torch.manual_seed(0)
        ids = torch.randint(0, model.config.vocab_size, (2, 16))
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        trained = {
            name: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach()
            for name, value in model.state_dict().items()
        }
        step_dir.mkdir(parents=True, exist_ok=True)
        torch.save(trained, step_dir / "trained_state.pt")
        contents = ["model", "optimizer", "extra"]
        manager = FSDPCheckpointManager(
            model=model,
            optimizer=optimizer,
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
