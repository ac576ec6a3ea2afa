"""The delivery oracle of tools/sweep.py (tools/sweep_delivery.py) judges what it
should: a wrong delivery is caught, a right one passes, and the state kinds without
known defects (packer states, extreme mixture weights) come out clean."""

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import sweep_delivery as sd  # noqa: E402


def test_exactly_once_names_tokens_delivered_twice_lost_or_foreign():
    sd.exactly_once([1, 2, 3], [1, 2, 3], "ok")
    for delivered, word in [([1, 2, 2, 3], "twice"), ([1, 2], "never"), ([1, 2, 3, 9], "not of")]:
        with pytest.raises(sd.Wrong, match=word):
            sd.exactly_once(delivered, [1, 2, 3], "case")


def test_pieces_of_checks_each_row_holds_its_pieces_tokens():
    tokens, offsets = sd.data(4)
    d, n = 1, int(offsets[2] - offsets[1])
    ids = np.zeros((1, 128), np.int64)
    ids[0, :n] = tokens[offsets[1] : offsets[2]]
    batch = {
        "documents": np.array([d]),
        "starts": np.array([0]),
        "lengths": np.array([n]),
        "rows": np.array([0]),
        "input_ids": ids,
    }
    assert sd.pieces_of(batch, tokens, offsets) == [(d, 0, n, 0)]
    ids[0, 3] += 1  # one token of another document
    with pytest.raises(sd.Wrong, match="does not hold the tokens"):
        sd.pieces_of(batch, tokens, offsets)


def test_same_batches_reports_pieces_before_step_numbers():
    a = [(0, [(1, 0, 5, 0)]), (1, [(2, 0, 5, 0)])]
    sd.same_batches(a, a, "ok")
    with pytest.raises(sd.Wrong, match="batch 1 after the resume differs"):
        sd.same_batches(a, [a[0], (1, [(3, 0, 5, 0)])], "case")
    with pytest.raises(sd.Wrong, match=r"^\[step\]"):
        sd.same_batches([(0, a[0][1])], [(7, a[0][1])], "case")


def test_mutations_are_reproducible_and_a_duplicate_key_is_text():
    state = {"version": 2, "epoch": 0, "position": 3, "packer": {"pending": [[1, 0, 2, 0]]}}
    ops = set()
    for seed in range(300):
        one = sd.mutate(random.Random(seed), state)
        assert one == sd.mutate(random.Random(seed), state)
        ops.add(sd.LAST["op"])
        what, mutated, text = one
        if text is not None:
            assert "named twice" in what and text.count(f'"{what.split("/")[-1].split()[0]}"') >= 2
            json.loads(text)  # Python's reader keeps the last value; shardkit must refuse it
    assert {"none", "number", "dup", "unseal", "list", "limits"} <= ops


@pytest.mark.parametrize("kind", ["packer", "weights"])
def test_kinds_without_known_defects_are_clean(kind):
    verdicts = {sd.run_case(kind, seed)["verdict"] for seed in range(40)}
    assert verdicts <= {"ok", "rejected"}, verdicts
