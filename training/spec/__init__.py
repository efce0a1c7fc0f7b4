"""The TrainingSpec: one typed object a user writes (YAML), from which the verl job (GPU
cluster) and the CPU backend (embedded default) are both derived."""

from training.spec.model import TrainingSpec, load_spec

__all__ = ["TrainingSpec", "load_spec"]
