# Sourced by the GPU scripts: the one place that knows what Vulkan needs on the GPU machine,
# whose NVIDIA ICD is installed but whose loader and glvnd are not (nor glslang, nor a network).
#
#   here:   gpu_pack_vulkan DIR      DIR/bin/glslangValidator and DIR/deb/*.deb (the loader, glvnd)
#   there:  gpu_vulkan_env DIR       unpacks DIR/deb into /, points the loader at the NVIDIA ICD,
#                                    and exports NABLAC_GLSLANG (DIR/bin) and NABLAC_OPENCL_DEVICE

gpu_pack_vulkan() {
  mkdir -p "$1/bin" "$1/deb"
  cp "$(command -v glslangValidator)" "$1/bin/"
  (cd "$1/deb" && apt-get download libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2 >/dev/null 2>&1)
}

gpu_vulkan_env() {
  local f icd
  for f in "$1"/deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
  if [ -z "${VK_DRIVER_FILES:-}" ]; then
    icd=$(find /usr/local/nvidia /usr/share/vulkan /etc/vulkan -name 'nvidia_icd*.json' 2>/dev/null | head -n1)
    [ -n "$icd" ] && export VK_DRIVER_FILES=$icd
    echo "Vulkan ICD: ${icd:-none found}"
  fi
  export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json}
  export NABLAC_GLSLANG=$PWD/$1/bin/glslangValidator
  export NABLAC_OPENCL_DEVICE=${NABLAC_OPENCL_DEVICE:-NVIDIA}
}
