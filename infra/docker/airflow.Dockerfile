# Airflow image for the api-server, scheduler, dag-processor, triggerer and workers.
# It carries the orchestration extra only: no torch, no verl, no vllm (tests/infra checks that
# the extra's resolved requirement set stays free of them). Build from the repository root:
#   docker build -f infra/docker/airflow.Dockerfile -t toolrl-airflow:0.1.0 .
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# Stage 1: build the toolrl wheel in a plain Python image (root may write anywhere there), so
# the Airflow stage receives one wheel file and never the source tree.
FROM ${PYTHON_IMAGE} AS build
WORKDIR /build
COPY pyproject.toml README.md ./
COPY training ./training
COPY serving ./serving
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /build/wheels .

# Stage 2: the official image plus toolrl[orchestration]; Airflow stays pinned to the base's
# version, as the official image documentation asks, so pip cannot up- or downgrade it.
FROM ${AIRFLOW_IMAGE}
COPY --from=build --chown=airflow:0 /build/wheels /tmp/wheels
COPY --chown=airflow:0 infra/docker/requirements-airflow.txt /tmp/requirements-airflow.txt
RUN pip install --no-cache-dir -r /tmp/requirements-airflow.txt \
        "$(find /tmp/wheels -name 'toolrl-*.whl')[orchestration]" \
    && rm -rf /tmp/wheels /tmp/requirements-airflow.txt
COPY --chown=airflow:0 dags /opt/airflow/dags
COPY --chown=airflow:0 plugins /opt/airflow/plugins
# The compose stack's pipeline config (TOOLRL_PIPELINE_CONFIG) and the mount point of the
# run volume shared with the Ray nodes: group 0 writable, setgid, as in the training images,
# so whichever container mounts the empty volume first gives it the same owner and mode.
COPY --chown=airflow:0 infra/compose/pipeline.yaml /opt/toolrl/pipeline.yaml
USER 0
RUN install -d -m 2775 -o root -g 0 /var/lib/toolrl
ENV AIRFLOW__CORE__LOAD_EXAMPLES=False
# The base image already runs as the unprivileged "airflow" user (uid 50000); stated again so
# that no later edit above leaves the image running as root.
USER 50000
# One image plays four roles with different liveness signals (api-server HTTP health, the
# scheduler's health server, `airflow jobs check` for the others), so each role's health check
# lives in compose and in the Helm chart rather than here.
HEALTHCHECK NONE
