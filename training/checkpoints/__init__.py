"""Checkpoints on shared storage: verl's local layout mirrored to S3, completion markers,
pruning, and the resume rule (only a complete checkpoint is ever resumed from)."""
