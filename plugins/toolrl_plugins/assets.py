"""Assets shared by producer and consumer DAGs (one module, one definition each).

In the plugins package, not the DAG folder: Airflow puts PLUGINS_FOLDER on sys.path in every
process that loads its settings, while DAGS_FOLDER is only added by the dag-processor, so a
plain `DagBag()` (a test, a CI parse check) could not import a module that lived beside the DAGs."""

from __future__ import annotations

from airflow.sdk import Asset

#: A dataset version that passed validation. Event extra: `training.pipeline.contracts.
#: PublishedDataset` as JSON (dataset_version, dataset_dir, uri, train, test, data_docs,
#: validation_page); a consumer needs only dataset_dir (and dataset_version to check it).
VALIDATED_DATASET = Asset(name="toolrl_validated_dataset", uri="toolrl://datasets/validated")

#: A model version the gate promoted to `champion`. Event extra: model_name, version, uri
#: (`training.pipeline.contracts.Promotion.champion_event_extra`).
CHAMPION_MODEL = Asset(name="toolrl_champion_model", uri="toolrl://models/champion")
