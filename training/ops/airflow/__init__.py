"""Airflow's own services on one machine (`toolrl airflow up|status|down`) and a REST client.

Nothing here imports Airflow: the services are `airflow ...` subprocesses of the project venv,
and everything else talks to the api-server over its REST API (v2), as a user's tooling would.
"""
