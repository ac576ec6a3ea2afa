"""Context parallelism on one accelerator: C CP ranks simulated in one process.

For each C, S and dtype, rows come from shardkit.TokenLoader: C loaders with
cp_rank 0 .. C-1 (the slices) and one without CP over the same rows
(cp_granularity=2C, the unsplit rows). Every CP rank computes causal attention
for its query slots against the K/V of all C slices (an all-gather, here a
concatenation) using only the metadata it received: a query attends the keys
with its document_ids (the document's index in the row, -1 on padding) and
position_ids not after its own. Its outputs, put back at cp_index, must equal
per-document causal attention over the unsplit row (the reference, float64);
the error of the same attention in the same dtype over the unsplit row is
printed beside it (what the dtype alone costs).

Two attention paths: SDPA per run (torch.nn.functional.scaled_dot_product_attention
on each run of consecutive positions of one document, keys = that document's
first positions, a causal offset mask; a document split into more than 4 runs
on a rank, as PTRR splits them, takes one masked call) and, on CUDA, flex_attention with a
block mask built from the same document ids and positions.

Timing (CUDA only, best of 3): the attention of each CP rank alone, max over
ranks / mean, for the rows split four ways: contiguous (C runs of the unsplit
row), document-blind head-tail (torch's _HeadTailLoadBalancer), shardkit's
per-document head-tail (cp_strategy="head_tail"), cp_strategy="balanced" and "ptrr".
The contiguous and blind splits take their queries and K/V from the unsplit
row (what they would hold); shardkit's from the slices. cp_strategy="ptrr" (tokens
dealt round-robin, mirrored) is checked and timed the same way.

    python bench/gpu_cp_check.py            # CUDA: C in 2, 4, 8; S = 8k, 32k; bf16, fp32
    python bench/gpu_cp_check.py --quick    # tiny, runs on CPU (python/tests)

Prints a compact summary and exits 1 when an error exceeds its tolerance.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import shardkit

HEADS, DIM = 4, 64
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 6e-2, torch.float64: 1e-10}


def corpus(seq_len, rows, rng):
    """Lognormal document lengths (median seq_len / 16) with SFT-like short ones
    mixed in, enough for `rows` rows; tokens = position in the corpus % 32000."""
    lengths = []
    total = 0
    while total < rows * seq_len:
        if rng.random() < 0.5:
            n = int(max(1, rng.lognormal(np.log(seq_len / 16), 1.0)))
        else:
            n = int(max(4, rng.lognormal(np.log(300), 0.8)))
        n = min(n, seq_len)
        lengths.append(n)
        total += n
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = (np.arange(offsets[-1]) % 32000).astype(np.int32)
    return tokens, offsets


class Model:
    """Random projections of (token, position) to Q, K, V [tokens, HEADS, DIM]."""

    def __init__(self, seq_len, device):
        g = torch.Generator().manual_seed(0)
        self.emb = torch.randn(32000, DIM, generator=g, dtype=torch.float64).to(device)
        self.pos = torch.randn(seq_len, DIM, generator=g, dtype=torch.float64).to(device)
        self.w = (torch.randn(3, DIM, HEADS * DIM, generator=g, dtype=torch.float64) / 8).to(device)

    def qkv(self, ids, positions, dtype):
        device = self.emb.device
        x = self.emb[torch.as_tensor(ids).long().to(device)]
        x = x + self.pos[torch.as_tensor(positions).long().to(device)]
        return [(x @ w).view(-1, HEADS, DIM).to(dtype) for w in self.w]


def runs_of(doc, pos):
    """(slot, document, first position, count) of each run of consecutive
    positions of one document among the slots (padding: doc < 0, skipped)."""
    doc, pos = np.asarray(doc), np.asarray(pos)
    real = np.nonzero(doc >= 0)[0]
    if real.size == 0:
        return []
    cut = np.nonzero((np.diff(real) != 1) | (np.diff(doc[real]) != 0) | (np.diff(pos[real]) != 1))[
        0
    ]
    starts = np.concatenate([[0], cut + 1])
    ends = np.concatenate([cut + 1, [real.size]])
    return [
        (int(real[a]), int(doc[real[a]]), int(pos[real[a]]), int(b - a))
        for a, b in zip(starts, ends)
    ]


def keys_by_document(k, v, doc, pos):
    """Each document's keys and values ordered by position, from gathered slots
    (only document_ids and position_ids used)."""
    doc_t = torch.as_tensor(np.asarray(doc), device=k.device)
    pos_t = torch.as_tensor(np.asarray(pos), device=k.device)
    out = {}
    for d in torch.unique(doc_t[doc_t >= 0]).tolist():
        at = torch.nonzero(doc_t == d).flatten()
        order = at[torch.argsort(pos_t[at])]
        assert (pos_t[order] == torch.arange(order.numel(), device=k.device)).all(), (
            "positions of a document are not 0 .. n-1 over the gathered slots"
        )
        out[d] = (k[order], v[order])
    return out


def attend_runs(q, runs, kv, max_runs=4):
    """SDPA per run: queries [slot, slot + n) of document d at positions p0 ..
    against its keys [0, p0 + n) with the causal offset. A document whose
    queries here form more than `max_runs` runs (PTRR's interleaving) takes one
    call over all its queries with the mask key position <= query position."""
    out = torch.zeros_like(q)
    by_doc = {}
    for run in runs:
        by_doc.setdefault(run[1], []).append(run)
    for d, doc_runs in by_doc.items():
        k, v = kv[d]
        if len(doc_runs) > max_runs:
            slots = torch.cat(
                [torch.arange(slot, slot + n, device=q.device) for slot, _, _, n in doc_runs]
            )
            qpos = torch.cat(
                [torch.arange(p0, p0 + n, device=q.device) for _, _, p0, n in doc_runs]
            )
            top = int(qpos.max()) + 1
            mask = torch.arange(top, device=q.device)[None, :] <= qpos[:, None]
            o = F.scaled_dot_product_attention(
                q[slots].transpose(0, 1),
                k[:top].transpose(0, 1),
                v[:top].transpose(0, 1),
                attn_mask=mask,
            )
            out[slots] = o.transpose(0, 1)
            continue
        for slot, _, p0, n in doc_runs:
            qq = q[slot : slot + n].transpose(0, 1)  # [H, n, D]
            kk, vv = k[: p0 + n].transpose(0, 1), v[: p0 + n].transpose(0, 1)
            if p0 == 0:
                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
            else:
                qpos = torch.arange(p0, p0 + n, device=q.device)
                mask = torch.arange(p0 + n, device=q.device)[None, :] <= qpos[:, None]
                o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask)
            out[slot : slot + n] = o.transpose(0, 1)
    return out


class Flex:
    """flex_attention of a rank's queries [L] against gathered keys [S] with
    the mask from document ids and positions; None when unavailable."""

    def __init__(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        self.create_block_mask = create_block_mask
        self.attn = torch.compile(flex_attention, dynamic=False)

    def __call__(self, q, k, v, qdoc, qpos, kdoc, kpos):
        def mask_mod(b, h, qi, ki):
            return (qdoc[qi] == kdoc[ki]) & (kdoc[ki] >= 0) & (kpos[ki] <= qpos[qi])

        mask = self.create_block_mask(
            mask_mod, 1, 1, q.shape[0], k.shape[0], device=q.device, _compile=True
        )
        o = self.attn(
            q.transpose(0, 1)[None],
            k.transpose(0, 1)[None],
            v.transpose(0, 1)[None],
            block_mask=mask,
        )
        return o[0].transpose(0, 1), mask


def reference(model, full, row, dtype):
    """Per-document causal attention over the unsplit row, in `dtype`."""
    ids, pos, doc = (full[key][row] for key in ("input_ids", "position_ids", "document_ids"))
    q, k, v = model.qkv(torch.as_tensor(ids), torch.as_tensor(pos), dtype)
    q, k, v = (t.to(model.emb.device) for t in (q, k, v))
    kv = keys_by_document(k, v, doc, pos)
    return attend_runs(q, runs_of(doc, pos), kv)


def gather_ranks(model, part, dtype):
    """The CP ranks' slices of one row -> (per-rank (q, k, v), all-gathered
    K, V, and the keys' document ids and positions): what each rank holds after
    the all-gather, from the metadata it received."""
    qkv = [
        model.qkv(torch.as_tensor(p["input_ids"][0]), torch.as_tensor(p["position_ids"][0]), dtype)
        for p in part
    ]
    kdoc = np.concatenate([p["document_ids"][0] for p in part])
    kpos = np.concatenate([p["position_ids"][0] for p in part])
    return qkv, torch.cat([t[1] for t in qkv]), torch.cat([t[2] for t in qkv]), kdoc, kpos


def blind_slices(full, row, C, split):
    """Slot indices (into the unsplit row) of each rank under a document-blind split."""
    S = full["input_ids"].shape[1]
    if split == "contiguous":
        return [np.arange(r * S // C, (r + 1) * S // C) for r in range(C)]
    w = S // (2 * C)
    return [
        np.concatenate(
            [np.arange(r * w, (r + 1) * w), np.arange((2 * C - 1 - r) * w, (2 * C - r) * w)]
        )
        for r in range(C)
    ]


def timed(fn, device, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (CPU)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--no-flex", action="store_true", help="skip flex_attention")
    ap.add_argument("--flex", action="store_true", help="flex_attention also off CUDA")
    ap.add_argument("--time", action="store_true", help="the timing also off CUDA")
    ap.add_argument(
        "--budget", type=float, default=120.0, help="seconds after which flex_attention stops"
    )
    args = ap.parse_args()
    start = time.perf_counter()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sizes = (256,) if args.quick else (8192, 32768)
    cps = (2, 4) if args.quick else (2, 4, 8)
    dtypes = (torch.float32, torch.bfloat16)
    rows = 2 if args.quick else 3
    use_flex = (device.type == "cuda" or args.flex) and not args.no_flex
    timing_on = device.type == "cuda" or args.time
    flex = None
    if use_flex:
        try:
            flex = Flex()
        except Exception as e:  # an older torch: say so, check the SDPA path only
            print(f"flex_attention unavailable: {type(e).__name__}: {e}")
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
        f"torch {torch.__version__}, shardkit from {os.path.dirname(shardkit.__file__)}, "
        f"heads {HEADS} x dim {DIM}"
    )
    rng = np.random.default_rng(0)
    failures = []
    errors = {}  # (dtype, path) -> max abs error over everything
    timing = []
    for S in sizes:
        model = Model(S, device)
        tokens, offsets = corpus(S, rows, rng)
        for C in cps:
            common = dict(seq_len=S, batch_size=1, shuffle=True, seed=1, num_threads=0)
            full_batches = list(
                shardkit.TokenLoader(tokens, offsets, cp_granularity=2 * C, **common)
            )[:rows]
            slices = {
                strategy: [
                    list(
                        shardkit.TokenLoader(
                            tokens, offsets, cp_size=C, cp_rank=r, cp_strategy=strategy, **common
                        )
                    )[:rows]
                    for r in range(C)
                ]
                for strategy in ("head_tail", "balanced", "ptrr")
            }
            for step, full in enumerate(full_batches):
                real_full = full["document_ids"][0] >= 0
                ref64 = reference(model, full, 0, torch.float64)
                for dtype in dtypes:
                    same = reference(model, full, 0, dtype).double()
                    base = float((same - ref64)[torch.as_tensor(real_full)].abs().max())
                    errors[dtype, "unsplit"] = max(errors.get((dtype, "unsplit"), 0.0), base)
                    for strategy, parts in slices.items():
                        part = [parts[r][step] for r in range(C)]
                        if os.environ.get("GPU_CP_CHECK_CORRUPT") == "position_ids":
                            # a self-test of the check (python/tests/test_gpu_cp_check.py)
                            part = [dict(p, position_ids=p["position_ids"] + 1) for p in part]
                        assert all((p["documents"] == full["documents"]).all() for p in part), (
                            "the CP ranks got other rows than the unsplit loader"
                        )
                        qkv, k, v, kdoc, kpos = gather_ranks(model, part, dtype)
                        kv = keys_by_document(k, v, kdoc, kpos)
                        paths = {"sdpa": []}
                        for r, p in enumerate(part):
                            runs = runs_of(p["document_ids"][0], p["position_ids"][0])
                            paths["sdpa"].append(attend_runs(qkv[r][0], runs, kv))
                        # flex in bf16 only (the timing's dtype: one compile per shape)
                        if (
                            flex is not None
                            and dtype == torch.bfloat16
                            and time.perf_counter() - start < args.budget
                        ):
                            kd = torch.as_tensor(kdoc, device=device)
                            kp = torch.as_tensor(kpos, device=device)
                            paths["flex"] = []
                            try:
                                for r, p in enumerate(part):
                                    qd = torch.as_tensor(p["document_ids"][0], device=device)
                                    qp = torch.as_tensor(p["position_ids"][0], device=device)
                                    o, _ = flex(qkv[r][0], k, v, qd, qp, kd, kp)
                                    o = torch.where((qd >= 0)[:, None, None], o, 0)
                                    paths["flex"].append(o)
                            except Exception as e:  # compile trouble: say so, keep SDPA
                                print(
                                    f"flex_attention failed, skipped: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0][:200]}"
                                )
                                flex = None
                                del paths["flex"]
                        for path, outs in paths.items():
                            got = torch.full_like(ref64, float("nan"))
                            for p, o in zip(part, outs):
                                idx = torch.as_tensor(p["cp_index"][0], device=device)
                                got[idx[idx >= 0]] = o[idx >= 0].double()
                            real = torch.as_tensor(real_full, device=device)
                            if torch.isnan(got[real]).any():
                                failures.append(f"{strategy} {path}: a real token got no output")
                            err = float((got[real] - ref64[real]).abs().max())
                            key = (dtype, f"{strategy}/{path}")
                            errors[key] = max(errors.get(key, 0.0), err)
                            if err > max(TOLERANCE[dtype], 4 * base):
                                failures.append(
                                    f"S={S} C={C} {dtype} {strategy}/{path}: error {err:.3g}"
                                )
                # Timing: one row per (S, C), bf16, each rank's attention alone.
                if not timing_on or step > 0:
                    continue
                dtype = torch.bfloat16
                fq, fk, fv = model.qkv(
                    torch.as_tensor(full["input_ids"][0]),
                    torch.as_tensor(full["position_ids"][0]),
                    dtype,
                )
                fdoc, fpos = full["document_ids"][0], full["position_ids"][0]
                layouts = {}
                for split in ("contiguous", "head_tail_blind"):
                    sl = blind_slices(
                        full, 0, C, "contiguous" if split == "contiguous" else "blind"
                    )
                    layouts[split] = [
                        (
                            fq[torch.as_tensor(s, device=device)],
                            fdoc[s],
                            fpos[s],
                            (fk, fv, fdoc, fpos),
                        )
                        for s in sl
                    ]
                for strategy, parts in slices.items():
                    part = [parts[r][step] for r in range(C)]
                    qkv, k, v, kdoc, kpos = gather_ranks(model, part, dtype)
                    gathered = (k, v, kdoc, kpos)
                    layouts[f"shardkit_{strategy}"] = [
                        (qkv[r][0], p["document_ids"][0], p["position_ids"][0], gathered)
                        for r, p in enumerate(part)
                    ]
                for name, ranks in layouts.items():
                    row = {"S": S, "C": C, "layout": name}
                    use = flex is not None and time.perf_counter() - start < args.budget
                    for path in ("sdpa", "flex") if use else ("sdpa",):
                        times = []
                        for q, qdoc, qpos, (k, v, kdoc, kpos) in ranks:
                            if path == "sdpa":
                                kv = keys_by_document(k, v, kdoc, kpos)
                                runs = runs_of(qdoc, qpos)
                                times.append(timed(lambda: attend_runs(q, runs, kv), device))
                            else:
                                qd = torch.as_tensor(np.asarray(qdoc), device=device)
                                qp = torch.as_tensor(np.asarray(qpos), device=device)
                                kd = torch.as_tensor(np.asarray(kdoc), device=device)
                                kp = torch.as_tensor(np.asarray(kpos), device=device)
                                _, mask = flex(q, k, v, qd, qp, kd, kp)
                                times.append(
                                    timed(
                                        lambda: flex.attn(
                                            q.transpose(0, 1)[None],
                                            k.transpose(0, 1)[None],
                                            v.transpose(0, 1)[None],
                                            block_mask=mask,
                                        ),
                                        device,
                                    )
                                )
                        row[path] = (max(times) / np.mean(times), max(times) * 1e3)
                    work = []
                    for q, qdoc, qpos, _ in ranks:
                        work.append(
                            sum(n * p0 + n * (n + 1) / 2 for _, _, p0, n in runs_of(qdoc, qpos))
                        )
                    row["work"] = max(work) / np.mean(work)
                    timing.append(row)

    print("\nmax abs error vs per-document causal attention over the unsplit row (float64):")
    for (dtype, path), err in sorted(errors.items(), key=lambda x: (str(x[0][0]), x[0][1])):
        tol = "" if path == "unsplit" else f"  (tolerance {TOLERANCE[dtype]:g})"
        print(f"  {str(dtype).replace('torch.', ''):9s} {path:22s} {err:.3e}{tol}")
    if timing:
        print(
            "\nper-CP-rank attention, bf16, one row per (S, C): max/mean over ranks "
            "(causal work | sdpa per run time | flex time), busiest rank in ms"
        )
        for row in timing:
            cells = [f"work {row['work']:.3f}"]
            for path in ("sdpa", "flex"):
                if path in row:
                    ratio, ms = row[path]
                    cells.append(f"{path} {ratio:.3f} ({ms:.2f} ms)")
            print(f"  S={row['S']:6d} C={row['C']} {row['layout']:22s} " + "  ".join(cells))
    elapsed = time.perf_counter() - start
    print(f"\n{len(failures)} failures, {elapsed:.1f} s")
    for f in failures:
        print("  FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
