# Local stand-in for python:3.11-slim-bookworm, for machines that cannot pull from a registry.
# Built by infra/images/build-local-base.sh on top of toolrl/debian-base:bookworm (a debootstrap
# root file system imported with `docker import`). Debian bookworm's python3.11 is 3.11.2.
ARG BASE_IMAGE=toolrl/debian-base:bookworm
FROM ${BASE_IMAGE}
# Debian's pip is 23.0.1, which every `python -m venv` copies (ensurepip takes the wheel in
# /usr/share/python-wheels). Its resolver has no backjumping (pip 23.1 added it): the CPU
# training set made it download 38 peft and 30 wandb releases and still be resolving after
# 6 minutes. The official image's venvs get a recent pip; so do these, from PyPI.
ARG PIP_VERSION=25.2
# Extra CA certificates of this machine's egress (the script copies them into extra-ca/; the
# folder may be empty). pip in the builds uses the system bundle through PIP_CERT.
COPY extra-ca/ /usr/local/share/ca-certificates/
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    LANG=C.UTF-8
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3.11 python3.11-venv python3-pip python3-venv python-is-python3 \
        curl \
    && update-ca-certificates \
    # the official image lets pip install into the system interpreter; Debian marks it
    # externally managed (PEP 668): without the marker `pip install` behaves the same
    && rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m pip download --no-deps --no-cache-dir --dest /usr/share/python-wheels \
        "pip==${PIP_VERSION}" \
    && rm /usr/share/python-wheels/pip-23.*.whl \
    && python3 -m pip install --no-cache-dir "pip==${PIP_VERSION}"
CMD ["python3"]
