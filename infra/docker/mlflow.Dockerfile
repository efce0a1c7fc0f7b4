# MLflow tracking server and model registry with the PostgreSQL driver and boto3 that the
# upstream image lacks, and the `auth` extra (Flask-WTF) that `--app-name basic-auth` needs.
# Artifacts go to S3 and are proxied (`--artifacts-destination`), so clients need no object
# store credentials to log or load models. The entrypoint (mlflow_auth.py, installed as
# toolrl-mlflow) writes the basic-auth config from the environment and refuses to start the
# server without its auth app; `toolrl-mlflow create-users URL` creates toolrl's MLflow users.
#   docker build -f infra/docker/mlflow.Dockerfile -t toolrl-mlflow:3.17.2 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "mlflow[auth]==3.17.2" "psycopg2-binary>=2.9,<3" \
        "boto3>=1.35"

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/venv /opt/venv
COPY --chmod=0755 infra/docker/mlflow_auth.py /usr/local/bin/toolrl-mlflow
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin mlflow
USER 10001
EXPOSE 5000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=5 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5000/health', timeout=2)"]
ENTRYPOINT ["toolrl-mlflow", "serve"]
