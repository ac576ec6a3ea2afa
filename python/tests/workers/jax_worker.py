"""What the JAX workers share (their side of python/tests/jax_launch.py):
joining the run of NUM_PROCESSES processes on CPU devices through a
coordinator on 127.0.0.1:PORT, and the devices grouped by process."""

import jax


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
