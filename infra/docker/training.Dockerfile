# Training image for the Ray head and GPU workers: CUDA torch, vLLM (verl's rollout engine),
# verl and the toolrl package. Versions are the set verl 0.9.1 declares for its vLLM backend
# (torch 2.11.0, vllm 0.24.0), with transformers from toolrl's training extra (vllm 0.24 accepts
# it). The CUDA user-space libraries come from the torch/vllm wheels (nvidia-* packages); only
# the driver comes from the host, through the NVIDIA container toolkit.
#   docker build -f infra/docker/training.Dockerfile -t toolrl-training:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /build
COPY infra/docker/constraints-gpu.txt infra/docker/requirements-training-gpu.txt ./
# The project's training extra pins the CPU torch that lies on the development machines, which
# conflicts with the CUDA torch here; so the GPU set is installed from its own requirement file
# (checked against the extra by tests/infra) and toolrl itself with --no-deps.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir -c constraints-gpu.txt \
        -r requirements-training-gpu.txt
COPY pyproject.toml README.md ./
COPY training ./training
COPY serving ./serving
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps . \
    && /opt/venv/bin/pip check

FROM ${PYTHON_IMAGE}
# gcc: Triton compiles its CUDA launcher at run time. wget: KubeRay's default probes call it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev wget \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/home/ray/.cache/huggingface
# KubeRay's convention: an unprivileged "ray" user (uid 1000) with a writable home, where Ray
# keeps /home/ray/.cache and the Hugging Face cache.
# /var/lib/toolrl: mount point of the run volume shared with Airflow (compose runs this user
# as 1000:0; group 0 writes it, setgid keeps new entries in the group)
# /home/ray/.cache/huggingface exists, owned by ray, before the hf-cache volume is mounted on it
# (Docker would create the missing parents as root: no cache of toolrl's own could be written).
RUN useradd --uid 1000 --create-home --shell /bin/bash ray \
    && install -d -m 2775 -o 1000 -g 0 /home/ray/.cache /home/ray/.cache/huggingface \
    && install -d -m 2775 -o root -g 0 /var/lib/toolrl
USER 1000
WORKDIR /home/ray
EXPOSE 6379 8265 10001
# Ray's processes are checked by the Ray runtime itself (KubeRay probes, `ray health-check`
# in compose); a container-level check would have to know whether this is a head or a worker.
HEALTHCHECK NONE
CMD ["ray", "--help"]
