"""The workshop PJRT plugin: registration with JAX.

JAX finds this module by two routes, as a submodule of the ``jax_plugins`` namespace
package and through the ``jax_plugins`` entry point in setup.py; it collects the module
names in a set and calls ``initialize()`` once. ``initialize()`` is idempotent anyway, so a
user calling it by hand cannot register the plugin twice (jaxlib would refuse the second
registration with ALREADY_EXISTS).

Selecting the platform: ``JAX_PLATFORMS=workshop`` (or ``workshop,cpu``),
``jax.config.update("jax_platforms", "workshop")``, or nothing at all, in which case the
priority below makes ``workshop`` JAX's default backend next to the built-in ``cpu``.

Client create options (``register_plugin(options=...)`` below): ``num_devices``, the
number of virtual devices (default 4, or the environment variable
``WORKSHOP_NUM_DEVICES``, which reaches this plugin only). JAX's process-wide
``jax_pjrt_client_create_options`` reaches every plugin (a TPU plugin refuses
``num_devices``), so the plugin ignores names it does not know (``WORKSHOP_DEBUG=1`` logs
them) and refuses only near misses of its own (``num_device``).
Under ``jax.distributed`` (several processes, docs/multiprocess.md "Multi-process") JAX adds
``node_id`` and ``num_nodes``; ``distributed_timeout`` (seconds, default 120) bounds every
wait for another process, and ``mpi_library`` (set here from the ``mpich`` wheel of the
``distributed`` extra) names the MPI library the processes talk through.

``trace()`` records the PJRT C API calls JAX makes into the plugin (see ``tracing``).
"""

import atexit
import ctypes
import importlib.util
import os
import sys

from .teach.tracing import trace  # noqa: F401  (public API)

PLATFORM_NAME = "workshop"
# Above the built-in CPU backend (0), so workshop becomes the default when JAX_PLATFORMS
# is unset.
PRIORITY = 500
DEFAULT_OPTIONS = {"num_devices": 4}
# The jaxlib releases (major, minor) this plugin supports; setup.py's JAX_REQUIREMENT says
# the same to pip. The compiler uses jaxlib's MLIR bindings and private JAX modules whose
# names change between minor releases (jaxlib 0.9 has no `ir.NameLoc`, for one), and the
# plugin reports the StableHLO versions of the jaxlib it was built with.
SUPPORTED_JAXLIB = (0, 10)

_registered = False


def mpi_library():
    """Path of libmpi.so.12 from the `mpich` wheel (the `distributed` extra), or None."""
    from importlib import metadata

    try:
        files = metadata.distribution("mpich").files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "libmpi.so.12":  # libmpi.so may be a linker script
            path = os.path.realpath(file.locate())
            if os.path.exists(path):
                return path
    return None


def client_options():
    """The create options of a new client: DEFAULT_OPTIONS, WORKSHOP_NUM_DEVICES, plus, when jax.distributed is
    initialized, `distributed_store` (JAX passes real key-value callbacks: without it they
    are garbage and the plugin refuses num_nodes > 1) and the MPI library."""
    from jax._src import distributed

    options = dict(DEFAULT_OPTIONS)
    # The plugin checks the value (an integer in [1, 1024]) when the client is created.
    num_devices = os.environ.get("WORKSHOP_NUM_DEVICES", "").strip()
    if num_devices:
        options["num_devices"] = num_devices
    if distributed.global_state.client is not None:
        options["distributed_store"] = 1
        library = mpi_library()
        if library is not None:
            options["mpi_library"] = library
    return options


# The counters WorkshopMemoryPoolCounters reports (runtime/memory_pool.h), in its order.
_MEMORY_POOL_COUNTERS = ("bytes_in_use", "bytes_cached", "peak_bytes_held", "system_allocs",
                         "reuses", "evictions", "largest_cached", "max_cached_bytes")


def memory_pool_counters():
    """The process's memory pool counters (runtime/memory_pool.h), a dict of ints.

    bytes_in_use / bytes_cached: bytes of pooled-size blocks (a page and more) handed out /
    kept for reuse; peak_bytes_held: peak of their sum; system_allocs: blocks taken from
    the system (aligned_alloc); reuses: requests served from the cache; evictions: cached
    blocks given back to make room; largest_cached: largest free block, bytes;
    max_cached_bytes: the cache's capacity. A jitted program in a steady state takes its
    blocks from the cache: system_allocs stays put from one call to the next.

    Raises:
      FileNotFoundError: the plugin is not built (library_path).
    """
    lib = ctypes.CDLL(library_path())
    fn = lib.WorkshopMemoryPoolCounters
    fn.argtypes = (ctypes.POINTER(ctypes.c_int64), ctypes.c_int64)
    fn.restype = ctypes.c_int64
    values = (ctypes.c_int64 * len(_MEMORY_POOL_COUNTERS))()
    fn(values, len(values))
    return dict(zip(_MEMORY_POOL_COUNTERS, values))


def library_path():
    """Absolute path of the compiled plugin (the shared library exporting GetPjrtApi).

    ``WORKSHOP_PLUGIN_LIBRARY=/path/to/_plugin.so`` selects another build of the same
    sources instead (tests/run_sanitizers.py runs JAX on an instrumented one).

    Raises:
      FileNotFoundError: the plugin is not built (run ``pip install -e .`` or
        ``python setup.py build_ext --inplace``), or WORKSHOP_PLUGIN_LIBRARY names no file.
    """
    override = os.environ.get("WORKSHOP_PLUGIN_LIBRARY")
    if override:
        if not os.path.isfile(override):
            raise FileNotFoundError(f"WORKSHOP_PLUGIN_LIBRARY={override} is not a file")
        return os.path.abspath(override)
    spec = importlib.util.find_spec("jax_plugins.workshop._plugin")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the workshop PJRT plugin is not built: run `pip install -e .` or "
            "`python setup.py build_ext --inplace` in the repository")
    return spec.origin


def preload_openblas():
    # The plugin links libscipy_openblas.so; loading it globally first lets the dynamic
    # loader satisfy that dependency whichever environment the plugin was built in.
    import scipy_openblas32

    path = os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


class _AsCachePlatform:
    """A backend as JAX's cache check sees it: platform "cpu", everything else forwarded."""

    platform = "cpu"

    def __init__(self, backend):
        self._backend = backend

    def __getattr__(self, name):
        return getattr(self._backend, name)


def _enable_platform_features():
    from jax._src import compilation_cache
    from jax._src.interpreters import mlir

    # JAX lowers buffer donation (tf.aliasing_output) only for platforms on a fixed list;
    # any other platform silently drops donate_argnums. Our executor honours aliasing, so
    # add our name. (jax/_src/interpreters/mlir.py, `_platforms_with_donation`.)
    if PLATFORM_NAME not in mlir._platforms_with_donation:
        mlir._platforms_with_donation.append(PLATFORM_NAME)

    # The persistent compilation cache is used only if backend.platform is in a list local
    # to compilation_cache.is_cache_used (tpu, gpu, cpu, neuron). Our executables serialize
    # (PJRT_Executable_Serialize / DeserializeAndLoad, see plugin_src/runtime/serialize.h),
    # so let that check see a workshop backend as "cpu". The cache key still hashes our
    # platform version and topology, so entries never mix with the CPU backend's.
    if not getattr(compilation_cache.is_cache_used, "_workshop", False):
        is_cache_used = compilation_cache.is_cache_used

        def is_cache_used_with_workshop(backend):
            if getattr(backend, "platform", None) == PLATFORM_NAME:
                backend = _AsCachePlatform(backend)
            return is_cache_used(backend)

        is_cache_used_with_workshop._workshop = True
        compilation_cache.is_cache_used = is_cache_used_with_workshop

    # Compiling for a topology (jax.experimental.topologies): when a client of the same
    # platform exists, JAX compiles through it (compiler._get_cross_compile_backend), and
    # jaxlib's jax::CompileWithTopology then waits for a compile on its thread pool while
    # holding the GIL; our compiler is Python, so PJRT_Compile could never take the GIL.
    # JAX's other route, the compile-only client, calls PJRT_Compile on the caller's thread:
    # use it for our platform. (PJRT_Compile refuses after a bounded wait for the GIL should
    # anything else call it that way; runtime/compiler_bridge.cc.)
    from jax._src import compiler

    if not getattr(compiler._get_cross_compile_backend, "_workshop", False):
        get_cross_compile_backend = compiler._get_cross_compile_backend

        def get_cross_compile_backend_without_workshop(compile_only_backend):
            if getattr(compile_only_backend, "platform", None) == PLATFORM_NAME:
                return None
            return get_cross_compile_backend(compile_only_backend)

        get_cross_compile_backend_without_workshop._workshop = True
        get_cross_compile_backend_without_workshop.__wrapped__ = get_cross_compile_backend
        compiler._get_cross_compile_backend = get_cross_compile_backend_without_workshop


def _install_pbroadcast(platform):
    """Lowers jax.lax.pbroadcast (StableHLO collective_broadcast) on `platform`.

    JAX registers pbroadcast's rule for gpu only (XLA:CPU's thunk emitter has no
    collective-broadcast: UNIMPLEMENTED); the plugin runs collective_broadcast within and
    across processes, so JAX's own rule is registered for our platform too.
    """
    from jax._src.interpreters import mlir
    from jax._src.lax import parallel

    mlir.register_lowering(parallel.pbroadcast_p, parallel._pbroadcast_lowering,
                           platform=platform)


def _release_clients_before_distributed_shutdown():
    """At exit under jax.distributed: destroys the PJRT clients before JAX's own clean-up
    shuts the coordination service down.

    jaxlib's client wrapper (xla/python/pjrt_ifrt/pjrt_client.cc) runs a thread that
    watches the other processes' state through the coordination service
    (WatchJobStateAsync, which feeds PJRT_Client_UpdateGlobalProcessInfo) until the
    client is destroyed, which cancels the watch quietly. JAX's exit hook drops its
    clients and then calls jax.distributed.shutdown(), but the clients survive until a
    garbage collection (a device and its client refer to each other), so the service
    goes first and every process logs "WatchTasksAsync failed ... CANCELLED" (or
    UNAVAILABLE). Dropping the clients and collecting first ends the watch in order. A
    client that the program still holds (an array in a global) is not freed, and the
    warning stays; it is harmless. So does a jax.distributed.shutdown() the program
    calls itself before exit.
    """
    from jax._src import distributed

    if distributed.global_state.client is None:
        return
    import gc

    from jax.extend import backend

    backend.clear_backends()
    # multihost_utils memoizes with functools.lru_cache on Mesh arguments, out of reach of
    # clear_backends: those meshes hold devices, and so the client.
    multihost_utils = sys.modules.get("jax.experimental.multihost_utils")
    for name in ("_local_to_global_aval", "_global_to_local_aval", "_flatten_pspecs"):
        getattr(getattr(multihost_utils, name, None), "cache_clear", lambda: None)()
    gc.collect()


def check_jaxlib_version(version=None):
    """Raises RuntimeError unless jaxlib `version` (default: the installed one) is supported.

    The message names the installed and the supported versions and the command that fixes
    it, instead of the AttributeError from deep inside the compiler that an unsupported
    jaxlib would otherwise give at the first compile.
    """
    if version is None:
        from jaxlib import version as jaxlib_version

        version = jaxlib_version.__version__
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    if major_minor != SUPPORTED_JAXLIB:
        series = ".".join(map(str, SUPPORTED_JAXLIB))
        raise RuntimeError(
            f"the workshop PJRT plugin supports jax/jaxlib {series}.x, but jaxlib {version} "
            f"is installed; the plugin was not registered. Fix: "
            f"pip install 'jax=={series}.*' 'jaxlib=={series}.*' and rebuild the plugin "
            f"(pip install -e '.[workshop]' in the repository).")


def initialize():
    """Registers the plugin with JAX (called by JAX's plugin discovery). Idempotent.

    Raises:
      RuntimeError: the installed jaxlib is not one this plugin supports (JAX's discovery
        logs the message and carries on without the `workshop` platform).
      FileNotFoundError: the plugin library is not built.
    """
    global _registered
    # exercise initialize_guard: begin (notebook 02 writes these lines)
    if _registered:  # JAX's discovery or a user called this before: nothing to do
        return
    # exercise initialize_guard: end
    from jax._src import xla_bridge

    check_jaxlib_version()
    preload_openblas()
    _enable_platform_features()
    xla_bridge.register_plugin(
        PLATFORM_NAME,
        priority=PRIORITY,
        library_path=library_path(),
        options=client_options,
    )
    # Exit hooks run last in, first out: this one runs before JAX's clean-up (registered
    # by `import jax`) and after callbacks' (registered below), which needs the clients.
    atexit.register(_release_clients_before_distributed_shutdown)
    # After register_plugin: JAX accepts lowerings only for platforms it knows.
    from .extensions import analysis, callbacks, ffi, linalg

    callbacks.install(PLATFORM_NAME)
    ffi.install(PLATFORM_NAME)
    linalg.install(PLATFORM_NAME)
    analysis.install(PLATFORM_NAME)
    _install_pbroadcast(PLATFORM_NAME)
    _registered = True
