"""Pipeline-level configuration and the stage functions the Airflow tasks call."""
