# Local stand-in for python:3.11-slim-bookworm, for machines that cannot pull from a registry.
# Built by infra/images/build-local-base.sh on top of toolrl/debian-base:bookworm (a debootstrap
# root file system imported with `docker import`). Debian bookworm's python3.11 is 3.11.2.
ARG BASE_IMAGE=toolrl/debian-base:bookworm
FROM ${BASE_IMAGE}
# Extra CA certificates of this machine's egress (the script copies them into extra-ca/; the
# folder may be empty). pip in the builds uses the system bundle through PIP_CERT.
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3.11 python3.11-venv python3-pip python3-venv python-is-python3 \
        curl \
    && update-ca-certificates \
    && rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED \
    && rm -rf /var/lib/apt/lists/*
# The official image lets pip install into the system interpreter; Debian marks it externally
# managed (PEP 668): the marker is removed above so `pip install`/`pip wheel` behave the same.
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    LANG=C.UTF-8
CMD ["python3"]
