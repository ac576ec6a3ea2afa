"""Samples/s of packed image-text batches: shardkit's ConstantLengthDataset
against nanoVLM's ConstantLengthDataset (a transcription, below), same samples,
same budgets, one rank of 4, one epoch, interleaved rounds (bench_util's rule).

nanoVLM side (data/advanced_datasets.py, as its blog post ../shared/seeds/003_*
describes it; re-typed here, no nanoVLM import): the rank's strided share of the
indices (`all_indices[rank::world_size]`), a producer thread reading samples
into buffers of `num_of_sequences * seq_length` tokens (skipping samples of
`>= max_sample_length` tokens or more than `max_images_per_example` images),
`_balanced_greedy_knapsack` (delta 5, `max_images_per_knapsack`; groups
shuffled) and `_pack_one_group` (lists of per-token tensors stacked) into a
bounded `queue.Queue`; the consumer yields one pack at a time; its collator
pads `batch` packs to `seq_length` (left padding, attention mask 0) and
stacks them, images kept as a list.

shardkit side: `shardkit.torch.ConstantLengthDataset(samples, seq_len, batch_size,
rank, world_size, max_images_per_pack, max_images_per_example, lengths=,
vision_tokens=)`: the global MultimodalPlan (equal steps, vision cost balanced),
batches built in its background thread.

Samples (bench/multimodal_balance.py's "fixed" mix, seed 1): 1,500 VQA-style
samples, 20-300 text tokens + 64 inlined tokens per image, 0-6 images (one shared
uint8 [3, 16, 16] tensor each: no decode on either side). seq_len 1024, 18 images
per pack, 6 per sample, 8 rows per batch, rank 0 of 4.

    PYTHONPATH=python .venv/bin/python bench/multimodal_loader.py --rounds 5
"""

from __future__ import annotations

import argparse
import random
import threading
from queue import Queue

import torch
from bench_util import interleaved, load_average, machine, memcpy_line
from multimodal_balance import mix
from shardkit.torch import ConstantLengthDataset

SEQ_LEN, MAX_IMAGES, PER_SAMPLE, BATCH, WORLD, RANK = 1024, 18, 6, 8, 4, 0


class NanoVLMConstantLengthDataset(torch.utils.data.IterableDataset):
    """nanoVLM's ConstantLengthDataset, re-typed (see the module doc)."""

    def __init__(
        self,
        dataset,
        rank,
        world_size,
        max_sample_length=1024,
        seq_length=1024,
        num_of_sequences=1024,
        queue_size=2000,
        max_images_per_example=4,
        max_images_per_knapsack=18,
    ):
        self.dataset = dataset
        self.rank, self.world_size = rank, world_size
        self.max_sample_length = max_sample_length
        self.seq_length = seq_length
        self.max_length = seq_length * num_of_sequences
        self.queue_size = max(queue_size, 1)
        self.max_images_per_example = max_images_per_example
        self.max_images_per_knapsack = max_images_per_knapsack
        self._sentinel = object()

    def __iter__(self):
        def make_base_iterator():
            all_indices = list(range(len(self.dataset)))[self.rank :: self.world_size]
            for idx in all_indices:
                sample = self.dataset[idx]
                if sample is None:
                    continue
                yield sample

        queue = Queue(maxsize=self.queue_size)
        producer = threading.Thread(
            target=self._producer, args=(make_base_iterator, queue), daemon=True
        )
        producer.start()
        while True:
            batch_of_batches = queue.get()
            if batch_of_batches is self._sentinel:
                break
            for batch in batch_of_batches:
                yield batch

    def _producer(self, make_iterator, queue):
        iterator = make_iterator()
        more_examples = True
        while more_examples:
            buffer, buffer_len = [], 0
            while buffer_len < self.max_length:
                try:
                    sample = next(iterator)
                except StopIteration:
                    more_examples = False
                    break
                if len(sample["input_ids"]) >= self.max_sample_length:
                    continue
                if len(sample["images"]) > self.max_images_per_example:
                    continue
                buffer.append(sample)
                buffer_len += len(sample["input_ids"])
            if not buffer:
                break
            groups = self._balanced_greedy_knapsack(
                buffer,
                self.seq_length,
                delta=5,
                max_images_per_knapsack=self.max_images_per_knapsack,
            )
            packed_group = []
            for g in groups:
                ids, lbl, am, ims = self._pack_one_group(g, buffer, self.seq_length)
                packed_group.append(
                    {"input_ids": ids, "labels": lbl, "attention_mask": am, "images": ims}
                )
            if packed_group:
                queue.put(packed_group)
        queue.put(self._sentinel)

    def _balanced_greedy_knapsack(self, buffer, L, delta=0, max_images_per_knapsack=None):
        lengths = [len(x["input_ids"]) for x in buffer]
        image_counts = [len(x["images"]) for x in buffer]
        items = sorted(enumerate(zip(lengths, image_counts)), key=lambda x: x[1][0], reverse=True)
        min_knapsacks = (sum(lengths) + L - 1) // L + delta
        load = [0] * min_knapsacks
        images = [0] * min_knapsacks
        groups = [[] for _ in range(min_knapsacks)]
        for idx, (item_len, item_images) in items:
            chosen = None
            for ks in sorted(range(len(load)), key=load.__getitem__):
                fits = load[ks] + item_len <= L
                if fits and (
                    max_images_per_knapsack is None
                    or images[ks] + item_images <= max_images_per_knapsack
                ):
                    chosen = ks
                    break
            if chosen is None:
                chosen = len(load)
                load.append(0)
                images.append(0)
                groups.append([])
            groups[chosen].append(idx)
            load[chosen] += item_len
            images[chosen] += item_images
        random.shuffle(groups)
        return [g for g in groups if g]

    def _pack_one_group(self, group_indices, batch, max_len):
        ids, lbl, am, ims = [], [], [], []
        for i in group_indices:
            ids.extend(batch[i]["input_ids"])
            lbl.extend(batch[i]["labels"])
            am.extend(batch[i]["attention_mask"])
            ims.extend(batch[i]["images"])
        if len(ids) > max_len:
            raise ValueError(f"Packed length {len(ids)} > max_len {max_len}")
        return torch.stack(ids), torch.stack(lbl), torch.stack(am), ims


def nanovlm_collate(packs, max_length=SEQ_LEN, pad_token_id=0):
    """Pads `packs` to max_length on the left and stacks them (its VQA collator)."""
    ids = [torch.nn.functional.pad(p["input_ids"], (max_length - len(p["input_ids"]), 0),
                                   value=pad_token_id) for p in packs]  # fmt: skip
    lbl = [torch.nn.functional.pad(p["labels"], (max_length - len(p["labels"]), 0), value=-100)
           for p in packs]  # fmt: skip
    am = [torch.nn.functional.pad(p["attention_mask"], (max_length - len(p["attention_mask"]), 0),
                                  value=0) for p in packs]  # fmt: skip
    return {
        "input_ids": torch.stack(ids),
        "labels": torch.stack(lbl),
        "attention_mask": torch.stack(am),
        "images": [p["images"] for p in packs],
    }


def samples_of():
    lengths, counts, vision = mix(False)
    image = torch.zeros(3, 16, 16, dtype=torch.uint8)
    samples = []
    for n, c in zip(lengths.tolist(), counts.tolist()):
        ids = torch.arange(1, n + 1, dtype=torch.int64)
        samples.append(
            {
                "input_ids": ids,
                "labels": ids.clone(),
                "attention_mask": torch.ones(n, dtype=torch.int64),
                "images": [image] * c,
                "vision_tokens": [64] * c,
            }
        )
    return samples, lengths, [v.tolist() for v in vision]


def run_nanovlm(samples):
    random.seed(0)
    ds = NanoVLMConstantLengthDataset(
        samples, RANK, WORLD, max_images_per_example=PER_SAMPLE, max_images_per_knapsack=MAX_IMAGES
    )
    batches = packs = tokens = n = images = 0
    pending = []
    for pack in ds:
        pending.append(pack)
        if len(pending) == BATCH:
            b = nanovlm_collate(pending)
            batches += 1
            tokens += int(b["attention_mask"].sum())
            pending = []
        packs += 1
        images += len(pack["images"])
    if pending:
        b = nanovlm_collate(pending)
        batches += 1
        tokens += int(b["attention_mask"].sum())
    n = sum(1 for i in range(RANK, len(samples), WORLD) if len(samples[i]["images"]) <= PER_SAMPLE)
    return {"samples": n, "batches": batches, "packs": packs, "tokens": tokens, "images": images}


def run_shardkit(samples, lengths, vision):
    ds = ConstantLengthDataset(
        samples,
        seq_len=SEQ_LEN,
        batch_size=BATCH,
        rank=RANK,
        world_size=WORLD,
        max_images_per_pack=MAX_IMAGES,
        max_images_per_example=PER_SAMPLE,
        lengths=lengths,
        vision_tokens=vision,
        check_plan=False,
    )
    batches = tokens = n = images = rows = 0
    for b in ds:
        batches += 1
        rows += int((b["row_tokens"] > 0).sum())
        tokens += int(b["row_tokens"].sum())
        n += len(b["documents"])
        images += len(b["images"])
    return {"samples": n, "batches": batches, "packs": rows, "tokens": tokens, "images": images}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    samples, lengths, vision = samples_of()
    print(machine())
    print(
        f"{len(samples)} samples, seq_len {SEQ_LEN}, {MAX_IMAGES} images per pack, "
        f"{PER_SAMPLE} per sample, batch {BATCH}, rank {RANK} of {WORLD}, {args.rounds} rounds"
    )
    best = interleaved(
        {
            "nanoVLM ConstantLengthDataset (transcription)": lambda: run_nanovlm(samples),
            "shardkit ConstantLengthDataset": lambda: run_shardkit(samples, lengths, vision),
        },
        args.rounds,
    )
    print(
        f"{'side':46} {'samples':>7} {'batches':>7} {'packs':>5} {'tokens':>7} {'images':>6} "
        f"{'CPU s':>7} {'wall s':>7} {'samples/CPU s':>13} {'samples/s':>9}"
    )
    rates = {}
    for name, b in best.items():
        o = b.out
        rates[name] = (o["samples"] / b.cpu, o["samples"] / b.wall)
        print(
            f"{name:46} {o['samples']:7} {o['batches']:7} {o['packs']:5} {o['tokens']:7} "
            f"{o['images']:6} {b.cpu:7.3f} {b.wall:7.3f} {rates[name][0]:13.0f} "
            f"{rates[name][1]:9.0f}"
        )
    (nc, nw), (sc, sw) = rates.values()
    print(f"shardkit / nanoVLM: {sc / nc:.2f}x samples per CPU s, {sw / nw:.2f}x samples/s wall")
    # A batch's token arrays (input_ids, labels, attention_mask: int64 [batch, seq_len]);
    # bytes per sample: a mean sample's share of them.
    batch_bytes = 3 * 8 * BATCH * SEQ_LEN
    per_sample = (
        batch_bytes
        * best["shardkit ConstantLengthDataset"].out["batches"]
        // max(1, best["shardkit ConstantLengthDataset"].out["samples"])
    )
    print(memcpy_line(per_sample, "samples", batch_bytes)[0])
    print(load_average())


if __name__ == "__main__":
    main()
