"""What the VLM torchrun run and its test share (vlm_torchrun_worker.py,
test_vlm_torchrun.py): where the tar shards lie and how the samples are packed,
so that the test plans the very epoch the workers read."""

# ConstantLengthDataset's packing options of the run (rank and world_size aside).
PACKING = dict(seq_len=64, batch_size=2, max_images_per_pack=4, seed=3)


def tar_shards(root):
    """The run's WebDataset shards under root/shards, in name order."""
    return sorted(str(p) for p in (root / "shards").glob("*.tar"))
