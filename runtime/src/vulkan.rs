//! The Vulkan backend: runs emitted GLSL compute kernels (compiler/src/emit, the ABI) through `ash`.
//!
//! Contract: [`open`] loads the Vulkan loader at run time (a binary without Vulkan builds and runs,
//! and `open` says "Vulkan loader not found"), picks a compute-capable device with shaderFloat64
//! (a discrete GPU first, then integrated, virtual, then CPU ones such as lavapipe), and runs one
//! tiny real launch under a fence timeout before returning. [`Device::load`] compiles GLSL to
//! SPIR-V (cached, see `gpu::cache`) and builds the pipeline; [`Device::run_range`] returns one
//! `PartialSums` per manifest sum whose merge gives the single-run bits.
//!
//! GLSL → SPIR-V: glslang (`glslangValidator -V --target-env vulkan1.1 -S comp`), not naga.
//! Tried in process first: naga 30.0.2's GLSL front end (features glsl-in, spv-out) rejects the
//! emitted kernels: "Unknown function 'umulExtended'" (Philox's mulhi), "Unknown function
//! 'unpackDouble2x32'" (the f64 kernels' opaque reads) and, with those stubbed out,
//! "NotSupported64BitLiteral" for the `0.0lf` f64 literals of the shared-memory sums. glslang is
//! the Khronos reference compiler and Debian ships it (glslang-tools). `NABLAC_GLSLANG` overrides
//! the binary's path; the SPIR-V is cached, so a second run does not start glslang.

use crate::gpu::{self, cache, Dispatch, GpuError};
use crate::manifest::{Manifest, Target};
use crate::report::PartialSums;
use ash::vk;
use std::ops::Range;
use std::time::Duration;

const DRIVER: &str = "Vulkan";
/// How long one dispatch may run before the fence wait gives up.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the probe launch in [`open`] may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

const PROBE_GLSL: &str = "#version 450
layout(local_size_x = 1) in;
layout(std430, set = 0, binding = 0) readonly buffer Inputs { double inputs[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Partials { double partials[]; };
layout(push_constant) uniform Push { uint a; uint b; uint c; uint d; uint e; uint f; uint zero; } pc;
shared double sh[1];
void main() { sh[0] = inputs[0] * 2.0lf + double(pc.zero); barrier(); partials[0] = sh[0]; }
";

/// An opened Vulkan device with its compute queue.
pub struct Device {
    _entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    device: ash::Device,
    queue: vk::Queue,
    queue_family: u32,
    name: String,
    driver: String,
    max_groups_x: u32,
    memory: vk::PhysicalDeviceMemoryProperties,
    /// What a driver's pipeline cache data is valid for: vendor, device, driver version and
    /// `pipelineCacheUUID` (the key of the persisted `VkPipelineCache`, `Device::load`).
    cache_id: String,
}

/// A compiled kernel: its pipeline and the manifest that says how to launch it.
/// The descriptor bindings of the inputs and partials buffers, from the manifest's parameter
/// table: a GLSL kernel has exactly these two buffers.
fn buffer_bindings(m: &Manifest) -> Result<[(u32, gpu::Arg); 2], GpuError> {
    let none = Dispatch { base: 0, groups: 0 };
    let args = gpu::arguments(m, &["input", "output", "scratch"], none, 0, 0)?;
    match args[..] {
        [a, b] if a.1 != b.1 && a.1 != gpu::Arg::Scratch && b.1 != gpu::Arg::Scratch => Ok([a, b]),
        _ => Err(GpuError::Launch(format!(
            "a GLSL kernel binds one inputs and one partials buffer; the manifest lists {args:?}"
        ))),
    }
}

/// The size of the push-constant block the manifest's `push` parameters fill.
fn push_size(m: &Manifest) -> Result<u32, GpuError> {
    let none = Dispatch { base: 0, groups: 0 };
    Ok(gpu::push_constants(m, none, 0, 0)?.len() as u32)
}

pub struct Kernel {
    manifest: Manifest,
    /// Whether the load compiled nothing: the SPIR-V and the driver's pipeline cache both hit.
    cache_hit: bool,
    main: Pipeline,
    /// `gpu::DeviceTree::GLSL`'s pipeline (bindings 0: the partials, 1: the tree's rows).
    tree: Pipeline,
    /// The inputs and partials buffers' descriptor bindings (`buffer_bindings`, read at load).
    buffers: [(u32, gpu::Arg); 2],
    clock: gpu::Clock,
    /// The host table of a run's partials (reused; `gpu::run_dispatches`).
    host: std::sync::Mutex<Vec<f64>>,
    /// What its dispatches reuse; held for a whole dispatch, so dispatches of one kernel never
    /// overlap.
    reused: std::sync::Mutex<Reused>,
}

/// A kernel's dispatch objects, made at its first dispatch and kept (creating and freeing them
/// every dispatch cost 4 ms of a 16M-path run on the H200: BENCHMARKS.md, 2026-12-04 evening).
#[derive(Default)]
struct Reused {
    /// One buffer per [`Slot`], grown on demand, never shrunk.
    buffers: [Option<Buffer>; 3],
    launch: Option<Launch>,
}

/// A descriptor pool (two sets), a command pool and a fence, reset before each dispatch.
#[derive(Copy, Clone)]
struct Launch {
    pool: vk::DescriptorPool,
    cmd_pool: vk::CommandPool,
    fence: vk::Fence,
}

/// A dispatch's buffers (indexes into `Reused::buffers`) and the memory each lives in.
#[derive(Copy, Clone)]
enum Slot {
    Inputs = 0,
    /// The group partials, where the device sums them (`gpu::DeviceTree`).
    DevicePartials = 1,
    /// What the host reads back: the group partials, or a device tree's rows. At least
    /// [`READBACK_MIN`] bytes, so that the one-path run before a run (its shifts) leaves a
    /// buffer the run's tree rows fit in.
    Readback = 2,
}

/// The smallest readback buffer: a 16M-path run's tree rows with 100 sums a row.
const READBACK_MIN: u64 = 1 << 20;

impl Slot {
    fn mem(self) -> Mem {
        match self {
            Slot::Inputs => Mem::Upload,
            Slot::DevicePartials => Mem::Device,
            Slot::Readback => Mem::Readback,
        }
    }
}

/// A compute pipeline with two storage buffers and push constants, and what it is built from.
struct Pipeline {
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
}

/// What a buffer is for, which picks its memory.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Mem {
    /// The host writes it once (host-visible, coherent).
    Upload,
    /// The host reads it back (host-visible, coherent, cached where there is such memory:
    /// uncached, write-combined memory reads at a fraction of the bus's speed).
    Readback,
    /// Only the device touches it (device-local where there is such memory).
    Device,
}

impl Kernel {
    /// Whether the load compiled nothing (SPIR-V and pipeline cache both from the cache).
    pub fn cache_hit(&self) -> bool {
        self.cache_hit
    }

    /// Where this kernel's runs spent their time so far.
    pub fn timings(&self) -> gpu::Timings {
        self.clock.read()
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vulkan::Kernel({})", self.manifest.entry_point)
    }
}

impl Kernel {
    /// The manifest the kernel was loaded with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
}

/// Opens the best Vulkan device and proves it with a tiny launch; errors name what is missing.
pub fn open() -> Result<Device, GpuError> {
    // SAFETY: loading the system loader library; ash checks the entry points it resolves.
    let entry = unsafe { ash::Entry::load() }.map_err(|e| {
        GpuError::Unavailable(format!("Vulkan loader (libvulkan.so.1) not found: {e}"))
    })?;
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_1);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: valid create info; the instance is destroyed in Drop (or below on failure).
    let instance = unsafe { entry.create_instance(&info, None) }.map_err(|e| {
        GpuError::Unavailable(format!(
            "Vulkan: no driver (ICD) could create an instance: {e}"
        ))
    })?;
    match pick(&entry, instance) {
        Ok(dev) => {
            dev.probe()?;
            Ok(dev)
        }
        Err(e) => Err(e),
    }
}

fn pick(entry: &ash::Entry, instance: ash::Instance) -> Result<Device, GpuError> {
    let fail = |instance: &ash::Instance, e: GpuError| {
        // SAFETY: nothing else was created from the instance yet.
        unsafe { instance.destroy_instance(None) };
        Err(e)
    };
    // SAFETY: instance is valid.
    let physicals = match unsafe { instance.enumerate_physical_devices() } {
        Ok(p) => p,
        Err(e) => {
            return fail(
                &instance,
                GpuError::Unavailable(format!("Vulkan: cannot list devices: {e}")),
            )
        }
    };
    let rank = |t: vk::PhysicalDeviceType| match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    };
    let mut candidates = Vec::new();
    let mut rejected = Vec::new();
    for (i, &p) in physicals.iter().enumerate() {
        // SAFETY: p comes from this instance.
        let props = unsafe { instance.get_physical_device_properties(p) };
        let name = props
            .device_name_as_c_str()
            .unwrap_or(c"?")
            .to_string_lossy()
            .into_owned();
        let features = unsafe { instance.get_physical_device_features(p) };
        let families = unsafe { instance.get_physical_device_queue_family_properties(p) };
        let Some(family) = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        else {
            rejected.push(format!("{name}: no compute queue"));
            continue;
        };
        if features.shader_float64 == 0 {
            rejected.push(format!("{name}: no shaderFloat64 (the kernels sum in f64)"));
            continue;
        }
        candidates.push((
            rank(props.device_type),
            i,
            p,
            family as u32,
            name,
            props.limits.max_compute_work_group_count[0],
        ));
    }
    candidates.sort_by_key(|c| (c.0, c.1));
    let Some((_, _, physical, queue_family, name, max_groups_x)) = candidates.into_iter().next()
    else {
        let why = if rejected.is_empty() {
            "no Vulkan device".to_string()
        } else {
            rejected.join("; ")
        };
        return fail(
            &instance,
            GpuError::Unavailable(format!("Vulkan: no usable device ({why})")),
        );
    };
    let mut driver_props = vk::PhysicalDeviceDriverProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver_props);
    // SAFETY: Vulkan 1.1 instance; the chain is well formed.
    unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
    let p = props2.properties;
    let uuid: String = p
        .pipeline_cache_uuid
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache_id = format!(
        "{:04x}:{:04x} driver {:#x} uuid {uuid}",
        p.vendor_id, p.device_id, p.driver_version
    );
    let driver = driver_props
        .driver_name_as_c_str()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let driver = if driver.is_empty() {
        "unknown driver".to_string()
    } else {
        driver
    };
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(queue_family)
        .queue_priorities(&priorities)];
    let features = vk::PhysicalDeviceFeatures::default().shader_float64(true);
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_features(&features);
    // SAFETY: valid create info for a device of this instance.
    let device = match unsafe { instance.create_device(physical, &info, None) } {
        Ok(d) => d,
        Err(e) => {
            return fail(
                &instance,
                GpuError::Driver {
                    driver: DRIVER,
                    device: format!("{name} ({driver})"),
                    what: "vkCreateDevice".into(),
                    message: e.to_string(),
                },
            )
        }
    };
    // SAFETY: the family was requested with one queue.
    let queue = unsafe { device.get_device_queue(queue_family, 0) };
    let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
    Ok(Device {
        _entry: entry.clone(),
        instance,
        physical,
        device,
        queue,
        queue_family,
        name,
        driver,
        max_groups_x,
        memory,
        cache_id,
    })
}

/// A storage buffer with its memory.
struct Buffer {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
}

impl Device {
    /// "device name (driver name)", as errors print it.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name, self.driver)
    }

    fn err(&self, what: &str, e: vk::Result) -> GpuError {
        GpuError::Driver {
            driver: DRIVER,
            device: self.describe(),
            what: what.to_string(),
            message: e.to_string(),
        }
    }

    fn probe(&self) -> Result<(), GpuError> {
        let manifest = Manifest::hand_written(
            Target::Glsl,
            crate::manifest::Precision::F64,
            "main",
            1,
            &[("x", 0.0)],
            &[],
            &["probe"],
        );
        let k = self.load(PROBE_GLSL, &manifest)?;
        let mut got = [0.0];
        let ran = self.dispatch(
            &k,
            &gpu::input_bytes(&manifest, &[1.25])?,
            (Dispatch { base: 0, groups: 1 }, None),
            (1, 0),
            PROBE_TIMEOUT,
            &mut got,
        );
        self.destroy_kernel(&k);
        ran?;
        if got != [2.5] {
            return Err(GpuError::Driver {
                driver: DRIVER,
                device: self.describe(),
                what: "probe launch".into(),
                message: format!("wrote {got:?}, expected [2.5]"),
            });
        }
        Ok(())
    }

    /// Compiles `source` (GLSL, target `glsl`) to SPIR-V (cached) and builds its compute pipeline.
    pub fn load(&self, source: &str, manifest: &Manifest) -> Result<Kernel, GpuError> {
        if manifest.target != Target::Glsl {
            return Err(GpuError::Launch(format!(
                "the Vulkan backend runs GLSL kernels, not {}",
                manifest.target.name()
            )));
        }
        if manifest.checkpoint == crate::manifest::Checkpoint::Scratch {
            return Err(GpuError::Launch(
                "GLSL kernels have no scratch buffer".into(),
            ));
        }
        let buffers = buffer_bindings(manifest)?;
        let push_size = push_size(manifest)?;
        let spirv = spirv_of(source, &manifest.entry_point, &self.describe())?;
        let tree_spirv = spirv_of(gpu::DeviceTree::GLSL, "main", &self.describe())?;
        // The driver's own compile of the SPIR-V (90 ms for a reverse kernel on an H100's first
        // dispatch) is kept too: a VkPipelineCache per (device, driver, SPIR-V), persisted in
        // nablac's cache, keyed on the two SPIR-V entries' keys (the SPIR-V is a function of
        // them). A load is a cache hit only when neither glslang nor the driver compiled.
        let key = cache::key(
            "vk-pipeline-cache",
            &self.cache_id,
            &[spirv.key.clone(), tree_spirv.key.clone()],
            "",
        );
        let initial = cache::get(&key, "vkpc");
        let pipeline_hit = initial.is_some();
        let pc = self.pipeline_cache(initial.as_deref().unwrap_or(&[]))?;
        let built = self
            .pipeline(pc, &spirv.words, buffers.map(|(b, _)| b), push_size)
            .and_then(
                |main| match self.pipeline(pc, &tree_spirv.words, [0, 1], 16) {
                    Ok(tree) => Ok((main, tree)),
                    Err(e) => {
                        self.destroy_pipeline(&main);
                        Err(e)
                    }
                },
            );
        if built.is_ok() && !pipeline_hit {
            // SAFETY: `pc` is this device's live pipeline cache.
            if let Ok(data) = unsafe { self.device.get_pipeline_cache_data(pc) } {
                if !data.is_empty() {
                    cache::put(&key, "vkpc", &data);
                }
            }
        }
        // SAFETY: the pipelines made from it do not need it to live on.
        unsafe { self.device.destroy_pipeline_cache(pc, None) };
        let (main, tree) = built?;
        Ok(Kernel {
            cache_hit: spirv.hit && pipeline_hit,
            manifest: manifest.clone(),
            main,
            tree,
            buffers,
            clock: gpu::Clock::default(),
            host: std::sync::Mutex::default(),
            reused: std::sync::Mutex::default(),
        })
    }

    /// A pipeline cache seeded with `data` (a driver ignores data of another device or version).
    fn pipeline_cache(&self, data: &[u8]) -> Result<vk::PipelineCache, GpuError> {
        let info = vk::PipelineCacheCreateInfo::default().initial_data(data);
        // SAFETY: valid create info; the caller destroys the cache.
        match unsafe { self.device.create_pipeline_cache(&info, None) } {
            Ok(pc) => Ok(pc),
            // Data the driver refuses outright: start empty.
            Err(_) if !data.is_empty() => self.pipeline_cache(&[]),
            Err(e) => Err(self.err("vkCreatePipelineCache", e)),
        }
    }

    /// A compute pipeline of `spirv` (entry `main`) over two storage buffers at `bindings` and
    /// `push_size` bytes of push constants, built through pipeline cache `pc`.
    fn pipeline(
        &self,
        pc: vk::PipelineCache,
        spirv: &[u32],
        bindings: [u32; 2],
        push_size: u32,
    ) -> Result<Pipeline, GpuError> {
        let d = &self.device;
        // SAFETY: every create call gets valid info; created objects are destroyed on failure or by destroy_pipeline.
        unsafe {
            let module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(spirv), None)
                .map_err(|e| self.err("vkCreateShaderModule", e))?;
            let bindings = bindings.map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            });
            let set_layout = match d.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            ) {
                Ok(l) => l,
                Err(e) => {
                    d.destroy_shader_module(module, None);
                    return Err(self.err("vkCreateDescriptorSetLayout", e));
                }
            };
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .offset(0)
                .size(push_size)];
            let set_layouts = [set_layout];
            let layout = match d.create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default()
                    .set_layouts(&set_layouts)
                    .push_constant_ranges(&ranges),
                None,
            ) {
                Ok(l) => l,
                Err(e) => {
                    d.destroy_descriptor_set_layout(set_layout, None);
                    d.destroy_shader_module(module, None);
                    return Err(self.err("vkCreatePipelineLayout", e));
                }
            };
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let info = [vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(layout)];
            let pipeline = match d.create_compute_pipelines(pc, &info, None) {
                Ok(p) => p[0],
                Err((_, e)) => {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                    d.destroy_shader_module(module, None);
                    return Err(self.err("vkCreateComputePipelines", e));
                }
            };
            Ok(Pipeline {
                module,
                set_layout,
                layout,
                pipeline,
            })
        }
    }

    fn destroy_pipeline(&self, p: &Pipeline) {
        // SAFETY: no command buffer using them is pending (dispatch waits for its fence).
        unsafe {
            self.device.destroy_pipeline(p.pipeline, None);
            self.device.destroy_pipeline_layout(p.layout, None);
            self.device
                .destroy_descriptor_set_layout(p.set_layout, None);
            self.device.destroy_shader_module(p.module, None);
        }
    }

    /// Frees a kernel's pipeline objects (the kernel must not be used afterwards).
    pub fn destroy_kernel(&self, k: &Kernel) {
        self.destroy_pipeline(&k.main);
        self.destroy_pipeline(&k.tree);
        let mut r = k.reused.lock().unwrap_or_else(|e| e.into_inner());
        for b in r.buffers.iter_mut().filter_map(Option::take) {
            self.free_buffer(&b);
        }
        if let Some(l) = r.launch.take() {
            self.destroy_launch(&l);
        }
    }

    fn destroy_launch(&self, l: &Launch) {
        // SAFETY: every dispatch waited for its fence (or for the device to go idle).
        unsafe {
            self.device.destroy_fence(l.fence, None);
            self.device.destroy_command_pool(l.cmd_pool, None);
            self.device.destroy_descriptor_pool(l.pool, None);
        }
    }

    /// The kernel's dispatch objects, reset for a new dispatch (made at the first).
    fn launch_objects(&self, slot: &mut Option<Launch>) -> Result<Launch, GpuError> {
        let d = &self.device;
        if let Some(l) = *slot {
            // SAFETY: the previous dispatch waited for its fence; nothing pending uses them.
            let reset = unsafe {
                d.reset_descriptor_pool(l.pool, vk::DescriptorPoolResetFlags::empty())
                    .and_then(|_| {
                        d.reset_command_pool(l.cmd_pool, vk::CommandPoolResetFlags::empty())
                    })
                    .and_then(|_| d.reset_fences(&[l.fence]))
            };
            return match reset {
                Ok(()) => Ok(l),
                Err(e) => {
                    *slot = None;
                    self.destroy_launch(&l);
                    Err(self.err("resetting the dispatch objects", e))
                }
            };
        }
        // SAFETY: valid create infos; each object is destroyed on failure here or by
        // destroy_launch.
        unsafe {
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(4)];
            let pool = d
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(2)
                        .pool_sizes(&sizes),
                    None,
                )
                .map_err(|e| self.err("vkCreateDescriptorPool", e))?;
            let cmd_pool = match d.create_command_pool(
                &vk::CommandPoolCreateInfo::default().queue_family_index(self.queue_family),
                None,
            ) {
                Ok(p) => p,
                Err(e) => {
                    d.destroy_descriptor_pool(pool, None);
                    return Err(self.err("vkCreateCommandPool", e));
                }
            };
            let fence = match d.create_fence(&vk::FenceCreateInfo::default(), None) {
                Ok(f) => f,
                Err(e) => {
                    d.destroy_command_pool(cmd_pool, None);
                    d.destroy_descriptor_pool(pool, None);
                    return Err(self.err("vkCreateFence", e));
                }
            };
            let l = Launch {
                pool,
                cmd_pool,
                fence,
            };
            *slot = Some(l);
            Ok(l)
        }
    }

    /// Makes `slots[slot]` a buffer of at least `size` bytes (the one there, or a new one).
    fn grow(&self, slots: &mut [Option<Buffer>; 3], slot: Slot, size: u64) -> Result<(), GpuError> {
        let s = &mut slots[slot as usize];
        if s.as_ref().is_none_or(|b| b.size < size) {
            if let Some(old) = s.take() {
                self.free_buffer(&old);
            }
            let size = match slot {
                Slot::Readback => size.max(READBACK_MIN),
                _ => size,
            };
            *s = Some(self.buffer(size, slot.mem())?);
        }
        Ok(())
    }

    /// Runs paths `range` of a `paths`-path run under `seed`; one `PartialSums` per manifest sum.
    /// `range.start` must be a multiple of 1024 and `range.end` the run's end or a multiple of WG.
    pub fn run_range(
        &self,
        k: &Kernel,
        inputs: &[f64],
        seed: u64,
        paths: u64,
        range: Range<u64>,
    ) -> Result<Vec<PartialSums>, GpuError> {
        let m = &k.manifest;
        let bytes = gpu::input_bytes(m, inputs)?;
        let max_paths = self.max_groups_x as u64 * m.workgroup_size as u64;
        let dispatches = gpu::plan_dispatches(m.workgroup_size, paths, &range, max_paths)?;
        let mut host = k.host.lock().unwrap_or_else(|e| e.into_inner());
        gpu::run_dispatches(m, paths, &dispatches, &mut host, &k.clock, |d, t, out| {
            self.dispatch(k, &bytes, (d, t), (paths, seed), RUN_TIMEOUT, out)
        })
    }

    /// Allocates the buffers and dispatch objects that running `range` of a `paths`-path run
    /// needs, so that the run allocates nothing: what a host does once, after loading.
    pub fn reserve(&self, k: &Kernel, paths: u64, range: Range<u64>) -> Result<(), GpuError> {
        let m = &k.manifest;
        let max_paths = self.max_groups_x as u64 * m.workgroup_size as u64;
        let dispatches = gpu::plan_dispatches(m.workgroup_size, paths, &range, max_paths)?;
        let tree = gpu::whole_run_tree(m, paths, &dispatches).map(|(_, t)| t);
        let mut reused = k.reused.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut *reused;
        k.clock.allocate(|| -> Result<(), GpuError> {
            for &d in &dispatches {
                self.grow_for(&mut r.buffers, m, (d, tree))?;
            }
            self.launch_objects(&mut r.launch).map(|_| ())
        })
    }

    /// Grows `slots` to what dispatch `d` of a kernel of `m` needs (with `tree`: summed on the
    /// device): the inputs, the group partials (in device memory under a tree, else in the
    /// readback buffer) and what is read back. Returns the partials' slot.
    fn grow_for(
        &self,
        slots: &mut [Option<Buffer>; 3],
        m: &Manifest,
        (d, tree): (Dispatch, Option<gpu::DeviceTree>),
    ) -> Result<Slot, GpuError> {
        let row = m.row_len() as u64 * 8;
        let partials = match tree {
            Some(_) => Slot::DevicePartials,
            None => Slot::Readback,
        };
        let inputs = (m.inputs_len() * m.precision.bytes()) as u64;
        self.grow(slots, Slot::Inputs, inputs)?;
        self.grow(slots, partials, d.groups as u64 * row)?;
        let back = tree.map_or(d.groups, |t| t.out_rows());
        self.grow(slots, Slot::Readback, back as u64 * row)?;
        Ok(partials)
    }

    /// A storage buffer of at least `size` bytes in memory fit for `mem`.
    fn buffer(&self, size: u64, mem: Mem) -> Result<Buffer, GpuError> {
        let d = &self.device;
        let size = size.max(16);
        // SAFETY: valid create infos; freed by free_buffer or on failure here.
        unsafe {
            let info = vk::BufferCreateInfo::default()
                .size(size)
                .usage(vk::BufferUsageFlags::STORAGE_BUFFER)
                .sharing_mode(vk::SharingMode::EXCLUSIVE);
            let buffer = d
                .create_buffer(&info, None)
                .map_err(|e| self.err("vkCreateBuffer", e))?;
            let req = d.get_buffer_memory_requirements(buffer);
            let host =
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            let fits = |t: &u32, flags: vk::MemoryPropertyFlags| {
                req.memory_type_bits & (1 << t) != 0
                    && self.memory.memory_types[*t as usize]
                        .property_flags
                        .contains(flags)
            };
            let types = 0..self.memory.memory_type_count;
            let first = |flags| types.clone().find(|t| fits(t, flags));
            let ty = match mem {
                Mem::Upload => first(host),
                Mem::Readback => first(host | vk::MemoryPropertyFlags::HOST_CACHED).or(first(host)),
                Mem::Device => first(vk::MemoryPropertyFlags::DEVICE_LOCAL)
                    .or(first(vk::MemoryPropertyFlags::empty())),
            };
            let Some(ty) = ty else {
                d.destroy_buffer(buffer, None);
                return Err(self.err(
                    "finding memory for a storage buffer",
                    vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
                ));
            };
            let memory = match d.allocate_memory(
                &vk::MemoryAllocateInfo::default()
                    .allocation_size(req.size)
                    .memory_type_index(ty),
                None,
            ) {
                Ok(m) => m,
                Err(e) => {
                    d.destroy_buffer(buffer, None);
                    return Err(self.err("vkAllocateMemory", e));
                }
            };
            if let Err(e) = d.bind_buffer_memory(buffer, memory, 0) {
                d.free_memory(memory, None);
                d.destroy_buffer(buffer, None);
                return Err(self.err("vkBindBufferMemory", e));
            }
            Ok(Buffer {
                buffer,
                memory,
                size,
            })
        }
    }

    fn free_buffer(&self, b: &Buffer) {
        // SAFETY: no pending work uses the buffer.
        unsafe {
            self.device.destroy_buffer(b.buffer, None);
            self.device.free_memory(b.memory, None);
        }
    }

    /// Maps `b` and copies `data` into it, or copies it out into `out` (transfer time of `k`).
    fn copy(
        &self,
        k: &Kernel,
        b: &Buffer,
        data: Option<&[u8]>,
        out: Option<&mut [u8]>,
    ) -> Result<(), GpuError> {
        // SAFETY: the mapping covers the buffer's size; the copies stay inside it.
        k.clock.transfer(|| unsafe {
            let p = self
                .device
                .map_memory(b.memory, 0, b.size, vk::MemoryMapFlags::empty())
                .map_err(|e| self.err("vkMapMemory", e))? as *mut u8;
            if let Some(data) = data {
                std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len().min(b.size as usize));
            }
            if let Some(out) = out {
                let n = out.len().min(b.size as usize);
                std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), n);
            }
            self.device.unmap_memory(b.memory);
            Ok(())
        })
    }

    /// One dispatch; writes its `groups * n_sums` partials into `out`, or with `tree`, that
    /// tree of them (`tree.out_rows() * n_sums`; the partials then stay in device memory).
    fn dispatch(
        &self,
        k: &Kernel,
        inputs: &[u8],
        (disp, tree): (Dispatch, Option<gpu::DeviceTree>),
        (paths, seed): (u64, u64),
        timeout: Duration,
        out: &mut [f64],
    ) -> Result<(), GpuError> {
        let mut reused = k.reused.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut *reused;
        let slots = &mut r.buffers;
        let back = Slot::Readback;
        let (partials, launch) = k.clock.allocate(|| -> Result<(Slot, Launch), GpuError> {
            let partials = self.grow_for(slots, &k.manifest, (disp, tree))?;
            Ok((partials, self.launch_objects(&mut r.launch)?))
        })?;
        let get = |s: Slot| {
            slots[s as usize]
                .as_ref()
                .ok_or_else(|| GpuError::Launch("a buffer went missing".into()))
        };
        let (input, partials, back) = (get(Slot::Inputs)?, get(partials)?, get(back)?);
        self.copy(k, input, Some(inputs), None)?;
        let tree = tree.map(|t| (t, back));
        self.submit(
            k,
            launch,
            (input, partials, tree),
            disp,
            paths,
            seed,
            timeout,
        )?;
        let mut bytes = vec![0u8; out.len() * 8];
        self.copy(k, back, None, Some(&mut bytes))?;
        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
            *o = f64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
        }
        Ok(())
    }

    /// Points `set`'s storage-buffer `bindings` at their buffers.
    fn bind_buffers(&self, set: vk::DescriptorSet, bindings: [(u32, &Buffer); 2]) {
        let infos = bindings.map(|(_, b)| {
            [vk::DescriptorBufferInfo::default()
                .buffer(b.buffer)
                .offset(0)
                .range(vk::WHOLE_SIZE)]
        });
        let writes = [0usize, 1].map(|i| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(bindings[i].0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&infos[i])
        });
        // SAFETY: the set is not in use (its pool was reset for this dispatch).
        unsafe { self.device.update_descriptor_sets(&writes, &[]) };
    }

    /// Records a dispatch of `groups` workgroups of `p` with `set` and the push constants `push`.
    fn record_dispatch(
        &self,
        cmd: vk::CommandBuffer,
        p: &Pipeline,
        set: vk::DescriptorSet,
        push: &[u8],
        groups: u32,
    ) {
        let d = &self.device;
        // SAFETY: `cmd` is recording; `p`, `set` and the push range match `p`'s layout.
        unsafe {
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, p.pipeline);
            d.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                p.layout,
                0,
                &[set],
                &[],
            );
            d.cmd_push_constants(cmd, p.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
            d.cmd_dispatch(cmd, groups, 1, 1);
        }
    }

    /// Records that compute shaders' writes are visible to `access` at `stage` from here on.
    fn barrier(
        &self,
        cmd: vk::CommandBuffer,
        access: vk::AccessFlags,
        stage: vk::PipelineStageFlags,
    ) {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(access);
        // SAFETY: `cmd` is recording.
        unsafe {
            self.device.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                stage,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        k: &Kernel,
        Launch {
            pool,
            cmd_pool,
            fence,
        }: Launch,
        (input, partials, tree): (&Buffer, &Buffer, Option<(gpu::DeviceTree, &Buffer)>),
        disp: Dispatch,
        paths: u64,
        seed: u64,
        timeout: Duration,
    ) -> Result<(), GpuError> {
        let d = &self.device;
        // SAFETY: the objects are the kernel's, reset (launch_objects); the fence wait (or
        // device_wait_idle on timeout) guarantees the GPU no longer uses them when this returns.
        unsafe {
            let result = (|| {
                let layouts = [k.main.set_layout, k.tree.set_layout];
                let sets = d
                    .allocate_descriptor_sets(
                        &vk::DescriptorSetAllocateInfo::default()
                            .descriptor_pool(pool)
                            .set_layouts(&layouts),
                    )
                    .map_err(|e| self.err("vkAllocateDescriptorSets", e))?;
                let (set, tree_set) = (sets[0], sets[1]);
                self.bind_buffers(
                    set,
                    k.buffers.map(|(binding, arg)| {
                        (
                            binding,
                            if arg == gpu::Arg::Inputs {
                                input
                            } else {
                                partials
                            },
                        )
                    }),
                );
                if let Some((_, rows)) = tree {
                    self.bind_buffers(tree_set, [(0, partials), (1, rows)]);
                }
                let cmd = d
                    .allocate_command_buffers(
                        &vk::CommandBufferAllocateInfo::default()
                            .command_pool(cmd_pool)
                            .level(vk::CommandBufferLevel::PRIMARY)
                            .command_buffer_count(1),
                    )
                    .map_err(|e| self.err("vkAllocateCommandBuffers", e))?[0];
                d.begin_command_buffer(
                    cmd,
                    &vk::CommandBufferBeginInfo::default()
                        .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                )
                .map_err(|e| self.err("vkBeginCommandBuffer", e))?;
                let push = gpu::push_constants(&k.manifest, disp, paths, seed)?;
                self.record_dispatch(cmd, &k.main, set, &push, disp.groups);
                if let Some((t, _)) = tree {
                    // The partials' tree, after the kernel's writes (one queue, in order).
                    self.barrier(
                        cmd,
                        vk::AccessFlags::SHADER_READ,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                    );
                    let words: Vec<u8> = t.words().iter().flat_map(|w| w.to_le_bytes()).collect();
                    let groups = t.threads().div_ceil(u64::from(gpu::DeviceTree::WG));
                    self.record_dispatch(cmd, &k.tree, tree_set, &words, groups as u32);
                }
                self.barrier(
                    cmd,
                    vk::AccessFlags::HOST_READ,
                    vk::PipelineStageFlags::HOST,
                );
                d.end_command_buffer(cmd)
                    .map_err(|e| self.err("vkEndCommandBuffer", e))?;
                let cmds = [cmd];
                k.clock.device(|| {
                    d.queue_submit(
                        self.queue,
                        &[vk::SubmitInfo::default().command_buffers(&cmds)],
                        fence,
                    )
                    .map_err(|e| self.err("vkQueueSubmit", e))?;
                    match d.wait_for_fences(
                        &[fence],
                        true,
                        timeout.as_nanos().min(u64::MAX as u128) as u64,
                    ) {
                        Ok(()) => Ok(()),
                        Err(vk::Result::TIMEOUT) => {
                            let _ = d.device_wait_idle();
                            Err(GpuError::Driver {
                                driver: DRIVER,
                                device: self.describe(),
                                what: format!(
                                    "dispatch of {} groups at path {}",
                                    disp.groups, disp.base
                                ),
                                message: format!("no completion within {timeout:?}"),
                            })
                        }
                        Err(e) => Err(self.err("vkWaitForFences", e)),
                    }
                })
            })();
            result
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every dispatch waited for its fence; kernels not destroyed leak with the device.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
        let _ = self.physical;
    }
}

/// GLSL → SPIR-V words through glslangValidator, cached on (source, device, glslang version).
pub fn compile_glsl(source: &str, entry: &str, device: &str) -> Result<Vec<u32>, GpuError> {
    spirv_of(source, entry, device).map(|s| s.words)
}

/// SPIR-V words, the cache key they are kept under, and whether they came from the cache.
struct Spirv {
    words: Vec<u32>,
    key: String,
    hit: bool,
}

/// [`compile_glsl`], with its cache key and whether it hit.
fn spirv_of(source: &str, entry: &str, device: &str) -> Result<Spirv, GpuError> {
    let tool = std::env::var("NABLAC_GLSLANG").unwrap_or_else(|_| "glslangValidator".into());
    let key = cache::key(
        "spirv-vulkan1.1",
        "any",
        std::slice::from_ref(&tool),
        source,
    );
    let _ = device; // SPIR-V does not depend on the device; the driver compiles it at pipeline creation.
    let (bytes, hit) = match cache::get(&key, "spv") {
        Some(b) => (b, true),
        None => {
            let b = run_glslang(&tool, source, entry, device)?;
            cache::put(&key, "spv", &b);
            (b, false)
        }
    };
    if bytes.len() % 4 != 0
        || bytes.len() < 20
        || u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) != 0x0723_0203
    {
        return Err(GpuError::Compile {
            compiler: "glslang",
            device: device.into(),
            entry: entry.into(),
            log: "output is not SPIR-V".into(),
        });
    }
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Spirv {
        words: preserve_signed_zeros_at_every_width(words),
        key,
        hit,
    })
}

/// SPIR-V's `OpExecutionMode` opcode, the `SignedZeroInfNanPreserve` mode and the `Float64`
/// capability (SPIR-V specification, 3.6 and 3.31).
const OP_CAPABILITY: u32 = 17;
const OP_EXECUTION_MODE: u32 = 16;
const SIGNED_ZERO_INF_NAN_PRESERVE: u32 = 4461;
const CAPABILITY_FLOAT64: u32 = 10;

/// Completes a module's `SignedZeroInfNanPreserve` execution modes: where an entry point keeps
/// signed zeros at one float width, it keeps them at 32 and (when the module uses doubles) 64
/// bits too. Without the mode, Vulkan may treat a zero's sign as insignificant (lavapipe made
/// `x * -0.0` +0.0, and the sums' padding is -0.0). The kernels ask for the 32-bit mode
/// (templates/kernel.txt); glslang emits only one such mode per entry point, so the 64-bit one
/// is added here. Anything else, or a module it cannot walk, is returned as it is.
pub fn preserve_signed_zeros_at_every_width(words: Vec<u32>) -> Vec<u32> {
    const HEADER: usize = 5;
    let mut float64 = false;
    // (position after the instruction, entry point, width) of each signed-zero mode.
    let mut modes: Vec<(usize, u32, u32)> = Vec::new();
    let mut at = HEADER;
    while at < words.len() {
        let (count, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
        if count == 0 || at + count > words.len() {
            return words;
        }
        let operands = &words[at + 1..at + count];
        match (op, operands) {
            (OP_CAPABILITY, [CAPABILITY_FLOAT64]) => float64 = true,
            (OP_EXECUTION_MODE, &[entry, SIGNED_ZERO_INF_NAN_PRESERVE, width]) => {
                modes.push((at + count, entry, width))
            }
            _ => {}
        }
        at += count;
    }
    let mut out = words;
    // Insert from the end so that earlier positions stay valid.
    for &(after, entry, width) in modes.iter().rev() {
        let widths: &[u32] = if float64 { &[32, 64] } else { &[32] };
        for &w in widths.iter().rev() {
            let held = modes.iter().any(|&(_, e, x)| e == entry && x == w);
            if w != width && !held {
                let mode = [
                    (4 << 16) | OP_EXECUTION_MODE,
                    entry,
                    SIGNED_ZERO_INF_NAN_PRESERVE,
                    w,
                ];
                out.splice(after..after, mode);
            }
        }
    }
    out
}

fn run_glslang(tool: &str, source: &str, entry: &str, device: &str) -> Result<Vec<u8>, GpuError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos());
    let dir = std::env::temp_dir().join(format!("nablac-glslang-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| GpuError::Unavailable(format!("cannot create {}: {e}", dir.display())))?;
    let (src, out) = (dir.join("kernel.comp"), dir.join("kernel.spv"));
    let result = (|| {
        std::fs::write(&src, source)
            .map_err(|e| GpuError::Unavailable(format!("cannot write {}: {e}", src.display())))?;
        let run = std::process::Command::new(tool)
            .args(["-V", "--target-env", "vulkan1.1", "-S", "comp", "-o"])
            .arg(&out)
            .arg(&src)
            .output()
            .map_err(|e| {
                GpuError::Unavailable(format!(
                    "glslang ({tool}) not found: {e}; install glslang-tools"
                ))
            })?;
        if !run.status.success() {
            let text = String::from_utf8_lossy(&run.stdout).into_owned()
                + &String::from_utf8_lossy(&run.stderr);
            return Err(GpuError::Compile {
                compiler: "glslang",
                device: device.into(),
                entry: entry.into(),
                log: gpu::log_line(&text, || format!("exit status {}", run.status)),
            });
        }
        std::fs::read(&out)
            .map_err(|e| GpuError::Unavailable(format!("cannot read {}: {e}", out.display())))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
