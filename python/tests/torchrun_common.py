"""What the kill-and-resume torchrun workers share (train_torchrun_worker.py,
loader_torchrun_worker.py): the pieces a batch delivered, the checkpoint
written once by rank 0 (atomically: the test waits for the file), training on
past the checkpoint until the test kills the run, and leaving together.

Import it before init_process_group: AGENT is this process's parent, the
torchrun agent; when the test kills the agent, the ranks stop too."""

import json
import os
import time

import torch.distributed as dist
from tiling import batch_pieces

AGENT = os.getppid()


def pieces(batch):
    """[document, start, length] of every piece of a batch (lists, as JSON gives
    them back)."""
    return [list(p) for p in batch_pieces(batch)]


def gather_states(loader, delivered):
    """Every rank's (state_dict, delivered pieces), on every rank (a collective)."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (loader.state_dict(), delivered))
    return gathered


def write_checkpoint(root, checkpoint):
    """checkpoint.json, written whole or not at all (the test polls for it)."""
    tmp = root / "checkpoint.tmp"
    tmp.write_text(json.dumps(checkpoint))
    tmp.rename(root / "checkpoint.json")


def _exit_if_the_agent_is_gone():
    if os.getppid() != AGENT:
        os._exit(1)


def train_until_killed(loader, checkpoint_step, checkpoint, each_step=None):
    """Iterates `loader`, collecting the delivered pieces; calls each_step() after
    every batch (a collective), and checkpoint(delivered) after step
    `checkpoint_step` on every rank; then trains on slowly until the test kills
    the agent. If the epoch ends first, waits for the kill (at most 30 s) and
    returns."""
    delivered = []
    for step, batch in enumerate(loader, start=1):
        delivered += pieces(batch)
        if each_step is not None:
            each_step()
        if step == checkpoint_step:
            checkpoint(delivered)
        if step >= checkpoint_step:
            time.sleep(0.05)  # training on past the checkpoint until killed
        _exit_if_the_agent_is_gone()
    for _ in range(300):
        _exit_if_the_agent_is_gone()
        time.sleep(0.1)


def leave_together():
    """Every rank leaves at once: a rank that exits right after a collective
    while others still hold the store makes gloo abort them."""
    dist.barrier()
    dist.destroy_process_group()
