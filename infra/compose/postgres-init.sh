#!/bin/sh
# Runs once, on the first start of an empty PostgreSQL volume: one role and one database each
# for Airflow's metadata and MLflow's backend store, plus MLflow's user store (mlflow_auth:
# the basic-auth app's users and permissions, apart from the tracking data). The password comes
# from the environment (APP_DB_PASSWORD, set from .env by compose), never from this file.
# A volume created before mlflow_auth existed: create it once by hand (docs/DEPLOY.md, section 9).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres <<SQL
CREATE ROLE airflow LOGIN PASSWORD '${APP_DB_PASSWORD}';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE mlflow LOGIN PASSWORD '${APP_DB_PASSWORD}';
CREATE DATABASE mlflow OWNER mlflow;
CREATE DATABASE mlflow_auth OWNER mlflow;
SQL
