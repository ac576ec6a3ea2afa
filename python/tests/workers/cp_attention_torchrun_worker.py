"""One rank of the context-parallel exactness test (test_context_parallel.py).

For each layout (dp=2 x cp=2, then dp=1 x cp=4, then both again with
cp_strategy="balanced", which keeps short documents whole on one CP rank, and
with cp_strategy="ptrr", tokens dealt round-robin)
this rank takes its roles
from DataRoles(cp_axes="cp"), reads its CP slice of every batch from a
TokenLoader, and computes causal varlen attention (float64, tiny dims) for
its query tokens against K/V all-gathered over its CP group, using only the
metadata it received: the local cu_seqlens cut its slots into sequences
(sequence i holds the same slots on every CP rank), position_ids order the
keys causally, document_ids == -1 masks padding. With "balanced" and "ptrr" the local
sequences differ between ranks, so each query attends the all-gathered keys
of its row with the same document_ids (the piece's index in the row) and a
position_ids not after its own. The outputs of the group,
put back at cp_index, must equal full-sequence causal attention per document
over the unsplit row, which the loader without CP delivers (same plan, same
rows) with its own cu_seqlens. Writes cp-<rank>.json: batches checked, the
largest difference, and the real tokens compared.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import shardkit

SEQ_LEN = 96
D = 8


def attend(q, k, v, allowed):
    scores = (q @ k.T) / D**0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def gather(t, group, size):
    """t of every rank of `group` (size ranks), in group order."""
    out = [torch.empty_like(t) for _ in range(size)]
    dist.all_gather(out, t, group=group)
    return out


def main():
    root = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same weights on every rank
    emb = torch.randn(1000, D, dtype=torch.float64)
    pos_emb = torch.randn(SEQ_LEN, D, dtype=torch.float64)
    wq, wk, wv = (torch.randn(D, D, dtype=torch.float64) for _ in range(3))

    def project(ids, pos):
        x = emb[torch.as_tensor(ids) % 1000] + pos_emb[torch.as_tensor(pos)]
        return x @ wq, x @ wk, x @ wv

    report = {}
    layouts = [
        (dp, cp, s) for s in ("head_tail", "balanced", "ptrr") for dp, cp in ((2, 2), (1, 4))
    ]
    for dp, cp, strategy in layouts:
        roles = shardkit.DataRoles({"dp": dp, "cp": cp}, "dp", rank=rank, cp_axes="cp")
        groups = [dist.new_group([d * cp + c for c in range(cp)]) for d in range(dp)]
        group = groups[roles.dp_rank]
        common = dict(seq_len=SEQ_LEN, batch_size=2, seed=3, num_threads=0)
        sliced = shardkit.TokenLoader(
            root / "tokens.npy", root / "offsets.npy", roles=roles, cp_strategy=strategy, **common
        )
        unsplit = shardkit.TokenLoader(
            root / "tokens.npy",
            root / "offsets.npy",
            rank=roles.dp_rank,
            world_size=roles.dp_size,
            cp_granularity=2 * cp,
            **common,
        )
        worst, compared, batches, whole = 0.0, 0, 0, 0
        for batch, full in zip(sliced, unsplit, strict=True):
            batches += 1
            width = SEQ_LEN // cp
            ids = batch["input_ids"].reshape(-1)
            pos = batch["position_ids"].reshape(-1)
            doc = torch.as_tensor(batch["document_ids"].reshape(-1))
            q, k, v = project(ids, pos)

            # K, V and the key metadata of every CP rank of the group.
            ks, vs = gather(k, group, cp), gather(v, group, cp)
            kpos = gather(torch.as_tensor(pos), group, cp)
            kdoc = gather(doc, group, cp)
            out = torch.zeros_like(q)
            cu = batch["cu_seqlens"]
            if strategy != "head_tail":
                whole += int(
                    len(cu) != len(batch["cu_seqlens_padded"])
                    or not (cu * cp == batch["cu_seqlens_padded"]).all()
                )
                for row in range(batch["input_ids"].shape[0]):
                    sl = slice(row * width, (row + 1) * width)
                    key = torch.cat([t[sl] for t in ks])
                    val = torch.cat([t[sl] for t in vs])
                    key_pos = torch.cat([t[sl] for t in kpos])
                    key_doc = torch.cat([t[sl] for t in kdoc])
                    qd, qp = doc[sl], torch.as_tensor(pos[sl])
                    allowed = (key_doc[None, :] == qd[:, None]) & (key_doc[None, :] >= 0)
                    allowed &= key_pos[None, :] <= qp[:, None]
                    rows = (qd >= 0).nonzero().flatten()
                    out[row * width + rows] = attend(q[sl][rows], key, val, allowed[rows])
                cu = cu[:1]  # done
            else:
                assert (cu * cp == batch["cu_seqlens_padded"]).all()
            for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
                real_q = doc[a:b] >= 0
                if not real_q.any():
                    continue  # a padding run
                key = torch.cat([t[a:b] for t in ks])
                val = torch.cat([t[a:b] for t in vs])
                key_pos = torch.cat([t[a:b] for t in kpos])
                key_real = torch.cat([t[a:b] for t in kdoc]) >= 0
                allowed = key_real[None, :] & (
                    key_pos[None, :] <= torch.as_tensor(pos[a:b])[:, None]
                )
                allowed &= real_q[:, None]
                rows = real_q.nonzero().flatten()
                out[a + rows] = attend(q[a + rows], key, val, allowed[rows])
            # Back into full rows at cp_index, from every rank of the group.
            outs = gather(out, group, cp)
            indices = gather(torch.as_tensor(batch["cp_index"].reshape(-1)), group, cp)
            # The reference: causal attention per document over the unsplit rows.
            fq, fk, fv = project(full["input_ids"].reshape(-1), full["position_ids"].reshape(-1))
            fdoc = full["document_ids"].reshape(-1)
            expect = torch.zeros_like(fq)
            fcu = full["cu_seqlens"].tolist()
            for a, b in zip(fcu[:-1], fcu[1:]):
                if fdoc[a] < 0:
                    continue
                n = b - a
                expect[a:b] = attend(
                    fq[a:b], fk[a:b], fv[a:b], torch.ones(n, n, dtype=torch.bool).tril()
                )
            got = torch.full_like(expect, float("nan"))
            for o, idx in zip(outs, indices):
                for row in range(batch["input_ids"].shape[0]):
                    sl = slice(row * width, (row + 1) * width)
                    real = idx[sl] >= 0
                    got[row * SEQ_LEN + idx[sl][real]] = o[sl][real]
            real_full = torch.as_tensor(fdoc >= 0)
            assert not torch.isnan(got[real_full]).any(), "a real token got no output"
            worst = max(worst, float((got[real_full] - expect[real_full]).abs().max()))
            compared += int(real_full.sum())
        report[f"{strategy}-dp{dp}xcp{cp}"] = {
            "batches": batches,
            "max_abs_diff": worst,
            "tokens": compared,
            "batches_with_whole_documents": whole,
        }
    (root / f"cp-{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
