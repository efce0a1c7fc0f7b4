# MCP tool server: `toolrl mcp serve --mode mock|real`. Small on purpose: the serving extra
# pulls torch through transformers[serving], so this image installs the core package plus only
# the MCP server's own requirements (requirements-mcp.txt, kept equal to the serving extra's
# lines by tests/infra).
#   docker build -f infra/docker/mcp.Dockerfile -t toolrl-mcp:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /build
COPY infra/docker/requirements-mcp.txt ./
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir -r requirements-mcp.txt
COPY pyproject.toml README.md ./
COPY training ./training
COPY serving ./serving
RUN /opt/venv/bin/pip install --no-cache-dir .

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin toolrl
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
ENTRYPOINT ["toolrl", "mcp", "serve"]
CMD ["--mode", "real", "--host", "0.0.0.0", "--port", "8000"]
