"""toolrl's Airflow plugins: a Ray Jobs hook, a deferrable trigger that polls a job without
holding a worker slot, and the operators that submit and wait. No maintained Ray provider
exists for Airflow 3 (STACK_NOTES.md), so the project owns this small layer; everything it
does beyond talking to Airflow is in `training.jobs`."""
