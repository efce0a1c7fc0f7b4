# S3 EMULATOR, not an object store: moto's server (moto[server]), the S3-compatible endpoint the
# test suite already uses, for machines where MinIO's image cannot be pulled. It keeps every
# object in memory: a restart loses all buckets and objects, and it has no durability, no
# access control beyond accepting any key pair, and no production use. Use MinIO (or any real
# S3) wherever its image can be had; compose runs this only under the `s3-emulator` profile.
#   docker build -f infra/docker/s3-emulator.Dockerfile -t toolrl-s3-emulator:5.2 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "moto[server]>=5.2,<6"

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin moto
USER 10001
EXPOSE 9000
# moto answers its own dashboard route without credentials.
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=10 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9000/moto-api/', timeout=2)"]
ENTRYPOINT ["moto_server"]
CMD ["-H", "0.0.0.0", "-p", "9000"]
