"""MLflow model registry: register with lineage, aliases `challenger` / `champion` /
`previous`, promotion and rollback as alias moves."""
