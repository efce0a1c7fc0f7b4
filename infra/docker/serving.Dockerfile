# Serving image: `toolrl serve --model-uri models:/NAME@champion` resolves the champion in
# MLflow, pulls its weights from S3 and runs `vllm serve` with tool-call parsing on (OpenAI API
# and /health on port 8000). vLLM and torch versions match the training image
# (constraints-gpu.txt), so the rollout engine that trained a model is the one that serves it.
#   docker build -f infra/docker/serving.Dockerfile -t toolrl-serving:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /build
COPY infra/docker/constraints-gpu.txt infra/docker/requirements-serving-gpu.txt ./
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir -c constraints-gpu.txt \
        -r requirements-serving-gpu.txt
COPY pyproject.toml README.md ./
COPY training ./training
COPY serving ./serving
RUN /opt/venv/bin/pip install --no-cache-dir -c constraints-gpu.txt ".[serving]" \
    && /opt/venv/bin/pip check

FROM ${PYTHON_IMAGE}
# gcc: Triton (inside vLLM) compiles its CUDA launcher at run time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/home/toolrl/.cache/huggingface
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin toolrl
USER 10001
WORKDIR /home/toolrl
EXPOSE 8000
# Loading a 4B model takes minutes (a 35B MoE longer): the start period covers the download
# and CUDA graph capture before failures count.
HEALTHCHECK --interval=15s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["toolrl", "serve"]
