"""Images decoded and resized per second, side by side in one run:

  shardkit   shardkit.images.ImageDecoder (C++: libjpeg-turbo / libpng,
             Pillow's bilinear resize) over a batch of encoded images, on T
             C++ threads in this process (the GIL released);
  Pillow     Image.open(..).convert("RGB").resize((224, 224), BILINEAR) in a
             torch Dataset, through DataLoader(num_workers=K) (K worker
             processes; K=0: this process), the default collate stacking the
             uint8 tensors;
  memcpy     one-core copy bandwidth of this machine (bench_util: numpy copyto per CPU s,
             streaming and of one image in cache), in 224x224x3 images/s.

Both sides decode the same encoded bytes (held in memory: no file reads are
measured) to the same uint8 [n, 224, 224, 3] output; the run checks that the
outputs are equal (the resize is Pillow's bit for bit, and JPEG/PNG decode the
same here). Files: photo-like content (smooth gradients + noise), 224-1024 px
a side, JPEG quality 90 and PNG, made with Pillow.

Per core: CPU seconds of this process and its (reaped) worker processes
(bench_util.cpu_seconds, the rule of every bench here), so the figure does not depend on what
else runs on the machine; wall time beside it. Memory: peak PSS of this process
plus its workers (PSS, so pages a forked worker shares with its parent count
once; psutil, sampled every 50 ms); both sides hold the same encoded files and
outputs, so the difference is what the workers add. Best of --rounds interleaved
rounds. Prints the load average before and after.

    PYTHONPATH=python .venv/bin/python bench/multimodal_decode.py [--images 120] [--rounds 3]

--jpeg-draft: both sides in their JPEG draft mode (DCT-scaled decode when the
file is at least twice the target, then the same resize): shardkit's
ImageDecoder(jpeg_draft=True) against Pillow's im.draft("RGB", size) before
convert/resize (outputs checked equal as above). --formats picks JPEG, PNG.
"""

import argparse
import io
import os
import platform
import threading
import time

import bench_util
import numpy as np
import psutil
import torch
import torch.utils.data as tud
from PIL import Image
from shardkit.images import ImageDecoder

torch.set_num_threads(1)
SIZE = (224, 224)


def photo(h, w, rng):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    fx, fy = rng.uniform(0.5, 3, 2)
    base = np.stack(
        [
            127 + 100 * np.sin(fx * x / w * np.pi + fy * y / h),
            x * 255 / w,
            127 + 100 * np.cos(fy * y / h * np.pi),
        ],
        -1,
    )
    return np.clip(base + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)


def make_files(n, fmt, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(224, 1025, 2))
        buf = io.BytesIO()
        Image.fromarray(photo(h, w, rng)).save(
            buf, fmt, **({"quality": 90} if fmt == "JPEG" else {})
        )
        out.append(buf.getvalue())
    return out


class PillowImages(tud.Dataset):
    def __init__(self, files, draft=False):
        self.files = files
        self.draft = draft

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        im = Image.open(io.BytesIO(self.files[i]))
        if self.draft:
            im.draft("RGB", SIZE[::-1])
        im = im.convert("RGB").resize(SIZE[::-1], Image.BILINEAR)
        return torch.from_numpy(np.asarray(im))


class PeakRss:
    """Peak memory of this process plus its children, sampled in a thread: the
    sum of their PSS (proportional set size: a page shared by a forked worker
    and its parent counts once in all, not once per process)."""

    def __init__(self):
        self.peak = 0
        self.cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        me = psutil.Process()
        t0 = time.thread_time()
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self.cpu = time.thread_time() - t0  # the sampler's own CPU, not counted
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


cpu_seconds = bench_util.cpu_seconds


def run_shardkit(files, threads, batch, draft):
    decoder = ImageDecoder(size=SIZE, threads=threads, jpeg_draft=draft)
    outs = []
    with PeakRss() as rss:
        c0, t0 = cpu_seconds(), time.perf_counter()
        for k in range(0, len(files), batch):
            outs.append(decoder(files[k : k + batch])["pixel_values"])
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return wall, cpu - rss.cpu, rss.peak, np.concatenate(outs)


def run_pillow(files, workers, batch, draft):
    loader = tud.DataLoader(PillowImages(files, draft), batch_size=batch, num_workers=workers)
    outs = []
    with PeakRss() as rss:
        c0, t0 = cpu_seconds(), time.perf_counter()
        for b in loader:
            outs.append(b.numpy())
        del loader  # workers exit and are reaped: their CPU time is counted
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return wall, cpu - rss.cpu, rss.peak, np.concatenate(outs)


def memcpy_images_per_s():
    """(streaming, in cache) 224x224x3 uint8 images copied per CPU s (bench_util)."""
    image = SIZE[0] * SIZE[1] * 3
    stream, cache = bench_util.copy_gbps(image)
    return stream * 1e9 / image, cache * 1e9 / image


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=120, help="files per format")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="K: C++ threads / DataLoader workers")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--jpeg-draft", action="store_true", help="both sides' JPEG draft mode")
    ap.add_argument("--formats", default="JPEG,PNG")
    args = ap.parse_args()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cpus, {platform.python_version()}, "
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    seeds = {"JPEG": 1, "PNG": 2}
    formats = {f: make_files(args.images, f, seeds[f]) for f in args.formats.split(",")}
    if args.jpeg_draft:
        print("JPEG draft mode on both sides (DCT-scaled decode, then the resize)")
    for fmt, files in formats.items():
        mb = sum(map(len, files)) / 1e6
        print(f"{fmt}: {len(files)} files, {mb:.1f} MB encoded, 224-1024 px a side -> {SIZE}")
    sides = [("shardkit", 1), ("Pillow", 0), ("shardkit", args.workers), ("Pillow", args.workers)]
    best = {}
    for _ in range(args.rounds):
        for fmt, files in formats.items():
            ref = None
            for name, k in sides:
                run = run_shardkit if name == "shardkit" else run_pillow
                wall, cpu, rss, out = run(files, k, args.batch, args.jpeg_draft)
                if ref is None:
                    ref = out
                equal = np.array_equal(out, ref)
                key = (fmt, name, k)
                old = best.get(key)
                best[key] = (
                    min(wall, old[0]) if old else wall,
                    min(cpu, old[1]) if old else cpu,
                    max(rss, old[2]) if old else rss,
                    equal and (old[3] if old else True),
                )
    stream, cache = memcpy_images_per_s()
    print(
        f"memcpy: {stream:,.0f} images/s per core streaming, {cache:,.0f} in cache "
        f"(224x224x3 uint8 copies, numpy copyto; {bench_util.load_average()})"
    )
    print(
        f"{'format':6} {'side':9} {'K':>2} {'img/s/core':>11} {'img/s wall':>11} "
        f"{'peak PSS MB':>12} {'equal':>6}"
    )
    for fmt, files in formats.items():
        n = len(files)
        for name, k in sides:
            wall, cpu, rss, equal = best[(fmt, name, k)]
            label = f"{k}" if name == "shardkit" else f"{k}"
            print(
                f"{fmt:6} {name:9} {label:>2} {n / cpu:11.1f} {n / wall:11.1f} "
                f"{rss / 1e6:12.0f} {'yes' if equal else 'NO':>6}"
            )
        for k in (1, args.workers):
            pk = 0 if k == 1 else k
            ratio = (n / best[(fmt, "shardkit", k)][1]) / (n / best[(fmt, "Pillow", pk)][1])
            print(
                f"{fmt}: shardkit {k} thread(s) vs Pillow {pk} worker(s): {ratio:.2f}x per core; "
                f"PSS {best[(fmt, 'shardkit', k)][2] / 1e6:.0f} MB vs "
                f"{best[(fmt, 'Pillow', pk)][2] / 1e6:.0f} MB"
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
