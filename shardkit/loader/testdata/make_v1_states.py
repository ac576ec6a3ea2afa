"""Writes the version-1 state samples of loader_state_test.cc.

Run once against main at be449cb (before the state codec moved into the core),
with the Python module of that commit:
    PYTHONPATH=python python shardkit/loader/testdata/make_v1_states.py
The samples are what shardkit wrote then: the loader's state dict (pieces as
[item, length, start, images]) and the StreamingPacker's state dict (pieces as
(item, start, length, images), tuples written by json as lists), plus what came
next after each (recorded from that commit, not recomputed by the code under
test). The data set is synthetic and rebuilt by the C++ test: document d has
1 + (37 * d) % 50 tokens, token t of document d is (1000 * d + t) % 30011.
"""

import json
import os

import numpy as np

import shardkit

HERE = os.path.dirname(os.path.abspath(__file__))
D = 200


def dataset():
    lengths = np.array([1 + (37 * d) % 50 for d in range(D)], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.concatenate(
        [(1000 * d + np.arange(n)) % 30011 for d, n in enumerate(lengths)]
    ).astype(np.int32)
    return lengths, tokens, offsets


def batches(loader):
    out = []
    for b in loader:
        out.append(
            {
                "documents": b["documents"].tolist(),
                "starts": b["starts"].tolist(),
                "lengths": b["lengths"].tolist(),
                "rows": b["rows"].tolist(),
            }
        )
    return out


def main():
    lengths, tokens, offsets = dataset()
    opts = dict(
        seq_len=32,
        batch_size=2,
        shuffle=True,
        seed=2**64 - 5,
        algorithm="bfd",
        buffer=8,
        num_threads=0,
    )
    # Two consumers (world 2) run 3 batches each; their states are merged and
    # a run of 3 consumers continues; consumer 1 of it stops after 1 batch.
    states = []
    for rank in range(2):
        ld = shardkit.TokenLoader(tokens, offsets, rank=rank, world_size=2, **opts)
        it = iter(ld)
        for _ in range(3):
            next(it)
        states.append(ld.state_dict())
    merged = shardkit.TokenLoader.merge_states(states)
    ld = shardkit.TokenLoader(tokens, offsets, rank=1, world_size=3, **opts)
    ld.load_state_dict(merged)
    it = iter(ld)
    next(it)
    state = ld.state_dict()
    assert state["head"] and state["packer"]["pending"] and state["packer"]["buffered"]
    resumed = shardkit.TokenLoader(tokens, offsets, rank=1, world_size=3, **opts)
    resumed.load_state_dict(state)
    loader_sample = {
        "options": dict(opts, rank=1, world_size=3, seed=str(opts["seed"])),
        "state": state,
        "merged": merged,
        "next_batches": batches(resumed),
    }
    # The StreamingPacker's own state, in the packing binding's layout.
    sp = shardkit.StreamingPacker(16, algorithm="bfd", oversize="split", buffer=6)
    for i in range(40):
        sp.push(i, int(lengths[i]))
    sp.pop()
    pstate = sp.state()
    sp.finish()
    rest = [[list(p) for p in pack] for pack in iter(sp.pop, None)]
    packer_sample = {
        "options": {"capacity": 16, "algorithm": "bfd", "oversize": "split", "buffer": 6},
        "state": json.loads(json.dumps(pstate)),
        "next_packs_after_finish": rest,
    }
    with open(os.path.join(HERE, "loader_state_v1.json"), "w") as f:
        json.dump(loader_sample, f)
        f.write("\n")
    with open(os.path.join(HERE, "packer_state_v1.json"), "w") as f:
        json.dump(packer_sample, f)
        f.write("\n")
    print(
        "head",
        len(state["head"]),
        "pending",
        len(state["packer"]["pending"]),
        "buffered",
        len(state["packer"]["buffered"]),
        "next",
        len(loader_sample["next_batches"]),
    )
    print("packer pending", len(pstate["pending"]), "buffered", len(pstate["buffered"]))


if __name__ == "__main__":
    main()
