"""The embedded demo: local services on loopback and the whole pipeline through Airflow."""
