#!/bin/sh
# Runs once, on the first start of an empty PostgreSQL volume: one role and one database each
# for Airflow's metadata and MLflow's backend store. The password comes from the environment
# (APP_DB_PASSWORD, set from .env by compose), never from this file.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres <<SQL
CREATE ROLE airflow LOGIN PASSWORD '${APP_DB_PASSWORD}';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE mlflow LOGIN PASSWORD '${APP_DB_PASSWORD}';
CREATE DATABASE mlflow OWNER mlflow;
SQL
