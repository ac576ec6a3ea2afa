"""Regressions of issue 13 (hardening, inputs): each test is named after what
broke. The CLI must print one stderr line naming the flag and exit non-zero
on bad input, report write errors, and print unsigned values as unsigned."""

import json

import numpy as np


def _one_line_error(proc, flag):
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert flag in lines[0], proc.stderr
    return lines[0]


def test_json_prints_uint64_seed_and_epoch_unsigned(cli):
    out = cli(
        "shard",
        "--items",
        10,
        "--world",
        3,
        "--shuffle",
        "--seed",
        2**64 - 1,
        "--epoch",
        2**63,
        "--json",
    )
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert j["seed"] == 2**64 - 1 and j["epoch"] == 2**63


def test_eval_plan_huge_batch_names_batch_not_items(cli):
    line = _one_line_error(
        cli("eval-plan", "--items", 10, "--world", 2, "--batch", 2**63 - 1), "--batch"
    )
    assert "--items" not in line.split(":")[1]
    assert "9223372036854775807" in line


def test_pack_huge_world_names_world_not_vector_max_size(cli, tmp_path):
    lengths = tmp_path / "l.txt"
    lengths.write_text("1\n2\n3\n")
    for world in (2**63 - 1, 100_000_000):
        line = _one_line_error(
            cli("pack", "--lengths", lengths, "--capacity", 4, "--world", world), "--world"
        )
        assert "max_size" not in line


def test_pack_packs_per_rank_without_world_is_not_ignored(cli, tmp_path):
    lengths = tmp_path / "l.txt"
    lengths.write_text("1\n2\n3\n")
    _one_line_error(
        cli("pack", "--lengths", lengths, "--capacity", 4, "--packs-per-rank", "nan"),
        "--packs-per-rank",
    )
    _one_line_error(
        cli("pack", "--lengths", lengths, "--capacity", 4, "--packs-per-rank", 2),
        "--packs-per-rank: needs --world",
    )


def test_pack_npy_lengths_above_2_pow_53_are_exact(cli, tmp_path):
    path = tmp_path / "l.npy"
    big = 2**53 + 1  # not a double
    np.save(path, np.array([big, 1], dtype=np.int64))
    out = cli("pack", "--lengths", path, "--capacity", 2**62, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["tokens"] == big + 1
    text = tmp_path / "l.txt"
    text.write_text(f"{big}\n1\n")
    assert (
        json.loads(cli("pack", "--lengths", text, "--capacity", 2**62, "--json").stdout)["tokens"]
        == big + 1
    )


def test_missing_value_names_the_flag_not_the_next_argument(cli):
    line = _one_line_error(cli("shard", "--items", "--world", 4), "--items: missing value")
    assert "unexpected argument" not in line


def test_stdout_write_errors_fail():
    import subprocess

    from conftest import cli_path

    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [cli_path(), "shard", "--items", "10", "--world", "3", "--indices", "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "stdout: write error" in proc.stderr


def test_demo_out_dev_full_fails(cli):
    _one_line_error(cli("demo", "--out", "/dev/full", "--json"), "--out")


def test_replicate_says_every_item_on_every_rank_and_shuffles_per_rank(cli):
    out = cli("shard", "--items", 20, "--world", 3, "--remainder", "replicate", "--indices")
    assert out.returncode == 0, out.stderr
    assert "exactly once: yes" not in out.stdout
    assert "every item on every rank: yes" in out.stdout
    j = json.loads(
        cli(
            "shard", "--items", 20, "--world", 3, "--remainder", "replicate", "--indices", "--json"
        ).stdout
    )
    assert j["coverage"] == "every item on every rank" and j["shuffle"] is True
    orders = [r["indices"] for r in j["ranks"]]
    assert all(sorted(o) == list(range(20)) for o in orders)
    assert len({tuple(o) for o in orders}) == 3  # each rank its own order


def test_layout_refuses_meshes_past_max_devices_instead_of_materialising_them(cli):
    line = _one_line_error(
        cli(
            "layout",
            "--mesh",
            "x=16384,y=16384",
            "--spec",
            "x,y",
            "--shape",
            "16384,16384",
            "--json",
        ),
        "--mesh",
    )
    assert "--max-devices" in line
    out = cli("layout", "--mesh", "x=4,y=2", "--shape", "8,2", "--max-devices", 8, "--json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["devices"]) == 8


def test_layout_on_a_0d_shape_and_singular_words(cli):
    out = cli("layout", "--mesh", "x=2", "--shape", "")
    assert out.returncode == 0, out.stderr
    assert "(2 devices, 1 process)" in out.stdout
    assert "1 processes" not in out.stdout


def test_layout_spec_with_quotes_round_trips(cli):
    out = cli("layout", "--mesh", "x''=2", "--spec", "\"x''\"", "--shape", "4", "--json")
    # the mesh parser takes the name as written; the spec prints as Python's repr
    if out.returncode == 0:
        assert json.loads(out.stdout)["spec"] == "P(\"x''\")"


def test_error_values_with_newlines_stay_on_one_line(cli):
    _one_line_error(cli("shard", "--items", "1\n2", "--world", 3), "--items")
    _one_line_error(cli("layout", "--mesh", "x=2\ny=2", "--shape", "4"), "--mesh")


# Python: wrong types and out-of-range ints name the parameter and the value.


def _raises(exc, text, f):
    try:
        f()
    except exc as e:
        assert text in str(e), str(e)
        assert "\n" not in str(e), str(e)
        return
    raise AssertionError(f"no {exc.__name__} ({text})")


def test_mesh_float_size_is_a_type_error_not_bad_cast():
    import shardkit

    _raises(
        TypeError, "axes: expected an integer, got float 2.0", lambda: shardkit.Mesh({"x": 2.0})
    )
    _raises(TypeError, "axes: an axis name must be a str", lambda: shardkit.Mesh({1: 2}))


def test_pack_capacity_float_is_refused_not_truncated_or_overflowing():
    import shardkit

    _raises(
        TypeError,
        "capacity: expected an integer, got float 1.9",
        lambda: shardkit.pack([1, 2, 3], 1.9),
    )
    _raises(
        TypeError,
        "capacity: expected an integer, got float inf",
        lambda: shardkit.pack([1, 2, 3], float("inf")),
    )
    assert shardkit.pack([1, 2, 3], np.int32(3)).num_packs == 2


def test_ints_past_int64_name_the_parameter_and_value():
    import shardkit

    _raises(
        ValueError,
        "num_items: 9223372036854775808 does not fit",
        lambda: shardkit.ShardPlan(2**63, 4),
    )
    _raises(
        ValueError, "capacity: 18446744073709551616 does not fit", lambda: shardkit.pack([1], 2**64)
    )
    _raises(
        ValueError,
        "seed: 18446744073709551616 is outside [0, 2^64)",
        lambda: shardkit.ShardPlan(10, 4, seed=2**64),
    )
    _raises(ValueError, "epoch: -1 is outside", lambda: shardkit.EvalPlan(10, 4, 2, epoch=-1))
    _raises(
        TypeError,
        "batch_size: expected an integer, got float 2.5",
        lambda: shardkit.EvalPlan(10, 4, 2.5),
    )
    assert shardkit.ShardPlan(10, 4, seed=2**64 - 1).counts() == [3, 3, 2, 2]


def test_float_lengths_past_2_pow_63_are_not_negative_lengths():
    import shardkit

    _raises(
        ValueError,
        "lengths: item 1 is 1e+19, not a whole number below 2**63",
        lambda: shardkit.pack([1.0, 1e19], 4),
    )


def test_is_padding_checks_its_index():
    import shardkit

    shard = shardkit.ShardPlan(10, 4, remainder="pad").shard(3)  # [8, 9, 0*]
    assert [shard.is_padding(k) for k in range(3)] == [False, False, True]
    assert shard.is_padding(-1) is True  # Python's negative index, as shard[-1]
    _raises(IndexError, "index: 3 is outside [0, 3)", lambda: shard.is_padding(3))
    _raises(IndexError, "index: -4 is outside [0, 3)", lambda: shard.is_padding(-4))


def test_masked_mean_refuses_a_mask_of_another_length():
    import shardkit

    _raises(
        ValueError,
        "mask: has 1 entries but values has 2",
        lambda: shardkit.masked_mean([1.0, 2.0], [True]),
    )
    _raises(
        ValueError,
        "mask: has 3 entries",
        lambda: shardkit.masked_sum([1.0, 2.0], [True, True, False]),
    )
    assert shardkit.masked_mean([1.0, 3.0, 100.0], [True, True, False]) == 2.0


def test_global_masked_sum_refuses_a_mask_of_another_length():
    torch = __import__("pytest").importorskip("torch")
    from shardkit.torch import global_masked_sum

    _raises(
        ValueError,
        "mask: has shape (1,) but values has shape (2,)",
        lambda: global_masked_sum(torch.tensor([1.0, 2.0]), [True]),
    )


def test_partition_spec_with_quotes_round_trips():
    import shardkit

    spec = shardkit.PartitionSpec("x''", ('a"b', "it's"), None)
    assert eval(repr(spec), {"PartitionSpec": shardkit.PartitionSpec}) == spec


def test_readme_pack_example_runs_from_a_fresh_checkout(cli):
    # Regression: the README's `shardkit pack --lengths lengths.txt` failed
    # (no such file); the example now ships data/example_lengths.txt.
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("shardkit pack "))
    args = [str(ROOT / a) if a.startswith("data/") else a for a in line.split("#")[0].split()[1:]]
    out = cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert j["items"] == 2000 and j["dropped"] == 0
