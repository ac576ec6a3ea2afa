"""A real distributed run of a tiny vision-language model over real encoded
images (JPEG and PNG), stored as WebDataset tar shards and as a datasets
dataset: torchrun with 4 gloo processes (DistributedDataParallel, CPU), the
images decoded on the loader's C++ threads, killed (SIGKILL) mid-epoch after
a checkpoint, then resumed on 3 processes to the end of the epoch. Both
stores run side by side in the same two launches (one model and one dataset
each: starting torch and gloo on 4 and then 3 processes is most of the time).
Checked for each store: equal steps on every rank of each run, and every
sample the plan keeps delivered exactly once across the two runs (hard
timeouts on every launch)."""

import io
import json

import numpy as np
import pytest
from shardkit.image_sources import TarImageText
from shardkit.torch import ConstantLengthDataset
from torchrun_launch import finish, kill_after_checkpoint, launch
from vlm_common import PACKING, tar_shards

wds = pytest.importorskip("webdataset")
datasets = pytest.importorskip("datasets")
PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

N = 120


def write_data(root):
    rng = np.random.default_rng(21)
    rows = {"input_ids": [], "images": []}
    (root / "shards").mkdir()
    sinks = [wds.TarWriter(str(root / "shards" / f"shard-{k}.tar")) for k in range(3)]
    for i in range(N):
        ids = rng.integers(0, 256, int(rng.integers(10, 60)))
        images = []
        for j in range(int(rng.integers(0, 3))):
            h, w = (int(v) for v in rng.integers(24, 80, 2))
            y, x = np.mgrid[0:h, 0:w]
            px = np.stack([x * 3 % 256, y * 5 % 256, (x + y + i) % 256], -1)
            px = np.clip(px + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(px).save(buf, "JPEG" if (i + j) % 2 else "PNG")
            images.append(buf.getvalue())
        sample = {"__key__": f"s{i:04d}", "ids": ids.astype("<i4").tobytes()}
        for j, data in enumerate(images):
            ext = "jpg" if data[:2] == b"\xff\xd8" else "png"
            sample[f"{j}.{ext}"] = data
        sinks[i * 3 // N].write(sample)
        rows["input_ids"].append(ids.tolist())
        rows["images"].append([{"bytes": d, "path": None} for d in images])
    for s in sinks:
        s.close()
    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "images": datasets.Sequence(datasets.Image()),
        }
    )
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(root / "hf"))


KINDS = ("tar", "hf")


@pytest.mark.timeout(900)
def test_torchrun_vlm_killed_on_four_ranks_resumes_on_three_exactly_once(tmp_path):
    pytest.importorskip("torch")
    write_data(tmp_path)
    kinds = ",".join(KINDS)
    marker = tmp_path / "checkpoint.json"
    kill_after_checkpoint(
        lambda: launch("vlm_torchrun_worker.py", 4, tmp_path, "first", kinds), marker, retry=True
    )
    checkpoint = json.loads(marker.read_text())

    def second():
        return launch("vlm_torchrun_worker.py", 3, tmp_path, "resume", kinds)

    finish(second(), 600, second)
    resumed = [json.loads((tmp_path / f"resumed-{r}.json").read_text()) for r in range(3)]
    plan = ConstantLengthDataset(
        TarImageText(tar_shards(tmp_path)), rank=0, world_size=4, check_plan=False, **PACKING
    ).train_plan()
    kept = sorted(set(range(N)) - set(int(s) for s in plan.dropped_samples))
    for kind in KINDS:
        assert checkpoint[kind]["world"] == 4, kind
        runs = [r[kind] for r in resumed]
        steps = [r["steps"] for r in runs]
        assert len(set(steps)) == 1 and steps[0] > 0, (kind, steps)  # equal steps
        assert all(np.isfinite(r["loss"]) for r in runs), kind
        before = [d for rank in checkpoint[kind]["delivered"] for d in rank]
        after = [d for r in runs for d in r["documents"]]
        assert sorted(before + after) == kept, kind  # every kept sample exactly once
        assert len(before) > 0 and len(after) > 0, kind
