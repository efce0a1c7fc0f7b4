# Local stand-in for apache/airflow:3.3.2-python3.11, for machines that cannot pull from a
# registry. Built by infra/images/build-local-base.sh on toolrl/python:3.11-bookworm. It keeps
# what infra/docker/airflow.Dockerfile relies on in the official image: the "airflow" user
# (uid 50000, group 0), AIRFLOW_HOME=/opt/airflow, pip installing into that user's site
# (PIP_USER) with ~/.local/bin on PATH, curl for the health checks. The official image also
# installs Airflow with its published constraints and many providers; this one installs
# apache-airflow with the postgres extra only (toolrl's image adds the amazon provider).
ARG PYTHON_IMAGE=toolrl/python:3.11-bookworm
FROM ${PYTHON_IMAGE}
ARG AIRFLOW_VERSION=3.3.2
ENV AIRFLOW_HOME=/opt/airflow \
    AIRFLOW_UID=50000 \
    PIP_USER=true \
    PIP_NO_CACHE_DIR=1 \
    PATH=/home/airflow/.local/bin:$PATH \
    PYTHONUNBUFFERED=1
RUN useradd --uid 50000 --gid 0 --create-home --home-dir /home/airflow --shell /bin/bash airflow \
    && mkdir -p /opt/airflow/dags /opt/airflow/logs /opt/airflow/plugins \
    && chown -R airflow:0 /opt/airflow && chmod -R g+rwX /opt/airflow
USER 50000
WORKDIR /opt/airflow
RUN pip install "apache-airflow[postgres]==${AIRFLOW_VERSION}" \
    && airflow version
CMD ["airflow", "version"]
