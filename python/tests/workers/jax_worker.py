"""What the JAX workers share (their side of python/tests/jax_launch.py):
joining the run of NUM_PROCESSES processes on CPU devices through a
coordinator on 127.0.0.1:PORT, the devices grouped by process, and random
PartitionSpecs for the layout workers."""

import jax
import numpy as np


def initialize(process_id, num_processes, port, gloo=False, **options):
    """jax.distributed.initialize on CPU devices; `gloo` selects gloo CPU
    collectives; `options` go to initialize (timeouts)."""
    jax.config.update("jax_platforms", "cpu")
    if gloo:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=int(num_processes),
        process_id=int(process_id),
        **options,
    )


def devices_by_process():
    """{process index: its devices, in jax.devices() order}."""
    by_process = {}
    for d in jax.devices():
        by_process.setdefault(d.process_index, []).append(d)
    return by_process


def random_spec(rng, names, slots, p_none, p_axis):
    """`slots` random PartitionSpec entries over the mesh axes `names`, each axis
    used once: None with probability `p_none` (or when no axis is left), one axis
    with `p_axis - p_none`, else a tuple of one or two axes."""
    free = list(names)
    rng.shuffle(free)
    spec = []
    for _ in range(slots):
        kind = rng.random()
        if kind < p_none or not free:
            spec.append(None)
        elif kind < p_axis:
            spec.append(free.pop())
        else:
            take = rng.randint(1, min(2, len(free)))
            spec.append(tuple(free.pop() for _ in range(take)))
    return spec


def partition_counts(mesh_shape, spec, ndim):
    """The partitions of each of `ndim` array dimensions under the entries `spec`
    (None past its end) on a mesh of these axis sizes ({name: size})."""
    counts = []
    for i in range(ndim):
        entry = spec[i] if i < len(spec) else None
        axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
        counts.append(int(np.prod([mesh_shape[a] for a in axes])))
    return counts
