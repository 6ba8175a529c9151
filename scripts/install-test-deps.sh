#!/usr/bin/env bash
# Installs what nablac's test suite needs to push generated kernels through real compilers,
# all of it CPU-only (no GPU needed):
#   OpenCL  : PoCL (CPU ICD) + the ICD loader + headers + clinfo
#   Vulkan  : Mesa lavapipe (CPU ICD) + the loader + headers + vulkaninfo
#   GLSL    : glslangValidator (glslang-tools) and spirv-val (spirv-tools)
#   CUDA    : NVRTC (libnvrtc.so.12) and ptxas from NVIDIA's pip wheels, into .tools/cuda
#   LLVM 14 : llvm-14-dev and libpolly-14-dev, for the `llvm` feature (the vectorised CPU back end,
#             on by default in the nablac binary), linked statically (README.md says why)
# and writes .tools/env.sh (source it) exporting NABLAC_NVRTC, NABLAC_PTXAS and LD_LIBRARY_PATH.
#
# Idempotent: a second run installs nothing and takes about a second. `apt-get update` runs
# only when a package has no candidate in the local lists, or an install from them fails.
# Run as root on Debian 12 (bookworm); needs only apt and PyPI.
#
# Options (environment):
#   NABLAC_TOOLS_DIR           where the wheels and env.sh go (default: <repo>/.tools)
#   NABLAC_CUDA_WHEEL_VERSION  version of nvidia-cuda-{nvrtc,nvcc}-cu12 (default: 12.8.93)
#   NABLAC_SKIP_APT=1          do not touch apt (e.g. not root); only the CUDA wheels
#   NABLAC_SASS_TOOLS=1        also install cuobjdump + nvdisasm (13.x wheels) for scripts/sass-report.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${NABLAC_TOOLS_DIR:-$ROOT/.tools}
CUDA_VERSION=${NABLAC_CUDA_WHEEL_VERSION:-12.8.93}
SASS_VERSION=${NABLAC_SASS_WHEEL_VERSION:-13.2.86}
CUDA_DIR=$TOOLS/cuda
SASS_DIR=$TOOLS/sass

APT_PKGS=(
  pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev clinfo
  mesa-vulkan-drivers libvulkan1 libvulkan-dev vulkan-tools
  glslang-tools spirv-tools
  llvm-14-dev libpolly-14-dev
)

log() { printf '[install-test-deps] %s\n' "$*"; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# --- apt -------------------------------------------------------------------------------------
if [[ "${NABLAC_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${APT_PKGS[@]}"; do installed "$p" || missing+=("$p"); done
  # A fresh machine may also lack pip; the CUDA wheels need it.
  if ! python3 -m pip --version >/dev/null 2>&1; then
    installed python3-pip || missing+=(python3-pip)
  fi
  if ((${#missing[@]})); then
    SUDO=()
    if [[ $(id -u) != 0 ]]; then
      if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo DEBIAN_FRONTEND=noninteractive)
      else
        log "error: missing apt packages (${missing[*]}) and not root; rerun as root or set NABLAC_SKIP_APT=1" >&2
        exit 1
      fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    need_update=0
    for p in "${missing[@]}"; do
      cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
      if [[ -z "$cand" || "$cand" == "(none)" ]]; then need_update=1; break; fi
    done
    if ((need_update)); then log "apt-get update (no candidate for some package)"; "${SUDO[@]}" apt-get update -qq; fi
    log "apt-get install ${missing[*]}"
    if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
      log "install failed from the local lists; apt-get update and retry"
      "${SUDO[@]}" apt-get update -qq
      "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
  else
    log "apt packages: all present"
  fi
fi

# --- pip wheels: NVRTC + ptxas -----------------------------------------------------------------
find_nvrtc() { find "$CUDA_DIR" -name 'libnvrtc.so.12' 2>/dev/null | head -n1; }
find_ptxas() { find "$CUDA_DIR" -type f -name ptxas 2>/dev/null | head -n1; }

pip_target() { # dir, packages...
  local dir=$1; shift
  mkdir -p "$dir"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --upgrade --target "$dir" "$@"
}

stamp=$CUDA_DIR/.version
if [[ -n "$(find_nvrtc)" && -n "$(find_ptxas)" && "$(cat "$stamp" 2>/dev/null)" == "$CUDA_VERSION" ]]; then
  log "CUDA wheels $CUDA_VERSION: present in $CUDA_DIR"
else
  log "pip install nvidia-cuda-nvrtc-cu12==$CUDA_VERSION nvidia-cuda-nvcc-cu12==$CUDA_VERSION -> $CUDA_DIR"
  rm -rf "$CUDA_DIR"
  pip_target "$CUDA_DIR" "nvidia-cuda-nvrtc-cu12==$CUDA_VERSION" "nvidia-cuda-nvcc-cu12==$CUDA_VERSION"
  echo "$CUDA_VERSION" >"$stamp"
fi
NVRTC=$(find_nvrtc)
PTXAS=$(find_ptxas)
[[ -n "$NVRTC" && -n "$PTXAS" ]] || { log "error: wheels installed but libnvrtc.so.12 or ptxas not found under $CUDA_DIR" >&2; exit 1; }
chmod +x "$PTXAS"

CUOBJDUMP="" NVDISASM=""
if [[ "${NABLAC_SASS_TOOLS:-0}" == 1 ]]; then
  sstamp=$SASS_DIR/.version
  if [[ "$(cat "$sstamp" 2>/dev/null)" != "$SASS_VERSION" ]]; then
    log "pip install nvidia-cuda-cuobjdump==$SASS_VERSION nvidia-cuda-nvdisasm==$SASS_VERSION -> $SASS_DIR"
    rm -rf "$SASS_DIR"
    pip_target "$SASS_DIR" "nvidia-cuda-cuobjdump==$SASS_VERSION" "nvidia-cuda-nvdisasm==$SASS_VERSION"
    echo "$SASS_VERSION" >"$sstamp"
  else
    log "SASS tools $SASS_VERSION: present in $SASS_DIR"
  fi
fi
# Installed earlier (with NABLAC_SASS_TOOLS=1) counts too: env.sh keeps naming them.
if [[ -d "$SASS_DIR" ]]; then
  CUOBJDUMP=$(find "$SASS_DIR" -type f -name cuobjdump | head -n1)
  NVDISASM=$(find "$SASS_DIR" -type f -name nvdisasm | head -n1)
  [[ -n "$CUOBJDUMP" ]] && chmod +x "$CUOBJDUMP"
  [[ -n "$NVDISASM" ]] && chmod +x "$NVDISASM"
fi

# --- env file --------------------------------------------------------------------------------
NVRTC_LIBDIR=$(dirname "$NVRTC")
ENV=$TOOLS/env.sh
{
  echo "# Written by scripts/install-test-deps.sh; source it before cargo test."
  echo "export NABLAC_NVRTC='$NVRTC'"
  echo "export NABLAC_PTXAS='$PTXAS'"
  [[ -n "$CUOBJDUMP" ]] && echo "export NABLAC_CUOBJDUMP='$CUOBJDUMP'"
  [[ -n "$NVDISASM" ]] && echo "export NABLAC_NVDISASM='$NVDISASM'"
  echo "case \":\${LD_LIBRARY_PATH:-}:\" in *':$NVRTC_LIBDIR:'*) ;; *) export LD_LIBRARY_PATH='$NVRTC_LIBDIR'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} ;; esac"
} >"$ENV"

# --- where things are ------------------------------------------------------------------------
ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "not installed"; }
where() { command -v "$1" 2>/dev/null || echo "not found"; }
log "glslangValidator : $(where glslangValidator) (glslang-tools $(ver glslang-tools))"
log "spirv-val        : $(where spirv-val) (spirv-tools $(ver spirv-tools))"
log "OpenCL           : PoCL $(ver pocl-opencl-icd), ICD loader $(ver ocl-icd-libopencl1), clinfo: $(where clinfo)"
log "Vulkan           : lavapipe (mesa-vulkan-drivers $(ver mesa-vulkan-drivers)), loader $(ver libvulkan1), vulkaninfo: $(where vulkaninfo)"
log "LLVM             : $(/usr/lib/llvm-14/bin/llvm-config --version 2>/dev/null || echo "not found") (llvm-14-dev $(ver llvm-14-dev))"
log "NVRTC            : $NVRTC"
log "ptxas            : $PTXAS ($("$PTXAS" --version | tail -n1))"
if [[ -n "$CUOBJDUMP" ]]; then log "cuobjdump        : $CUOBJDUMP"; fi
if [[ -n "$NVDISASM" ]]; then log "nvdisasm         : $NVDISASM"; fi
log "env file         : $ENV   (source it: . $ENV)"
