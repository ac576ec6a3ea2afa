"""The shardkit command: JSON contract, audit exit codes, one-line errors."""

import json

import numpy as np
import pytest


def test_shard_json_matches_the_design_contract(cli):
    out = cli("shard", "--items", 10, "--world", 4, "--remainder", "pad", "--indices", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["items"] == 10 and doc["world"] == 4 and doc["window"] == [0, 10]
    assert doc["split"] == "round_robin" and doc["remainder"] == "pad"
    assert [r["indices"] for r in doc["ranks"]] == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]
    assert [r["padding"] for r in doc["ranks"]] == [0, 0, 1, 1]
    assert doc["exactly_once"] is True and doc["max_imbalance"] == 0


def test_shard_one_rank_with_window_and_workers(cli):
    # Rank 1 of 3 over the window [10, 30) of 100 items, split between 2 workers.
    shard = ["shard", "--items", 100, "--world", 3, "--rank", 1, "--offset", 10, "--limit", 20]
    shard += ["--workers", 2, "--indices", "--json"]
    out = cli(*shard, "--worker", 1)
    doc = json.loads(out.stdout)
    assert doc["window"] == [10, 30]
    (rank,) = doc["ranks"]
    assert rank["rank"] == 1 and rank["worker"] == 1
    assert rank["indices"] == list(range(11, 30, 3))[1::2]
    out = cli(*shard)
    (rank,) = json.loads(out.stdout)["ranks"]
    assert rank["indices"] == list(range(11, 30, 3))
    assert [w["indices"] for w in rank["workers"]] == [rank["indices"][0::2], rank["indices"][1::2]]


def test_human_output_is_readable(cli):
    out = cli("shard", "--items", 10, "--world", 4)
    assert out.returncode == 0
    assert "exactly once: yes" in out.stdout
    assert "0 4 8" in out.stdout


def test_balanced_weights_from_file_and_npy(cli, tmp_path):
    weights = np.arange(1, 21, dtype=np.int64)
    txt = tmp_path / "w.txt"
    txt.write_text("\n".join(map(str, weights)) + "\n")
    npy = tmp_path / "w.npy"
    np.save(npy, weights)
    docs = []
    for path in (txt, npy):
        out = cli(
            "shard", "--items", 20, "--world", 3, "--split", "balanced", "--weights", path, "--json"
        )
        assert out.returncode == 0, out.stderr
        docs.append(json.loads(out.stdout))
    assert docs[0] == docs[1]
    assert docs[0]["lower_bound"] == 70 and 70 <= docs[0]["max_load"] <= 72


def test_audit_exit_code_and_fields(cli):
    out = cli("audit", "--items", 1000003, "--world", 8, "--shuffle", "--seed", 4, "--json")
    assert out.returncode == 0
    doc = json.loads(out.stdout)
    assert doc["exactly_once"] and doc["method"] == "enumerated"
    huge = cli("audit", "--items", 2**63 - 1, "--world", 2**62, "--remainder", "pad", "--json")
    assert huge.returncode == 0, huge.stderr
    assert json.loads(huge.stdout)["method"] == "arithmetic"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--items", 10, "--world", 0], "--world: must be at least 1, got 0"),
        (["--items", 10, "--world", 3, "--rank", 3], "--rank: 3 is outside [0, 3)"),
        (["--items", -5, "--world", 3], "--items: must be at least 0, got -5"),
        (
            ["--items", "99999999999999999999", "--world", 3],
            "--items: '99999999999999999999' does not fit",
        ),
        (["--items", "ten", "--world", 3], "--items: 'ten' is not an integer"),
        (["--items", 10, "--world", 3, "--offset", 11], "--offset: 11 lies beyond the data"),
        (["--items", 10, "--world", 3, "--split", "diagonal"], "--split: unknown split 'diagonal'"),
        (
            ["--items", 10, "--world", 3, "--remainder", "keep"],
            "--remainder: unknown remainder 'keep'",
        ),
        (["--items", 10, "--world", 3, "--limit", -1], "--limit: must be at least 0, got -1"),
        (["--items", 10, "--world", 3, "--frobnicate"], "--frobnicate: unknown flag"),
        (["--world", 3], "--items: required"),
        (["--items", 10, "--world", 2**40], "--world: 1099511627776 ranks are too many to list"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(cli, args, fragment):
    for command in ("shard", "audit"):
        out = cli(command, *args)
        if command == "audit" and "too many to list" in fragment:
            continue
        assert out.returncode == 2, (command, out.stdout)
        assert out.stdout == ""
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], out.stderr


def test_bad_weights_files(cli, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("1\n2\n")
    nan = tmp_path / "nan.txt"
    nan.write_text("1\nnan\n3\n")
    neg = tmp_path / "neg.txt"
    neg.write_text("1\n-2\n3\n")
    junk = tmp_path / "junk.txt"
    junk.write_text("1\nabc\n3\n")
    cases = [
        (short, "--weights: expected one weight per item (3), got 2"),
        (nan, "--weights: weight of item 1 is nan"),
        (neg, "--weights: weight of item 1 is -2"),
        (junk, "line 2: 'abc' is not a number"),
        (tmp_path / "missing.txt", "--weights: cannot open"),
    ]
    for path, fragment in cases:
        out = cli("shard", "--items", 3, "--world", 2, "--split", "balanced", "--weights", path)
        assert out.returncode == 2
        assert fragment in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_every_command_has_help(cli):
    top = cli("--help")
    assert top.returncode == 0
    for command in ("shard", "audit", "demo"):
        assert command in top.stdout
        out = cli(command, "--help")
        assert out.returncode == 0 and "usage: shardkit " + command in out.stdout


def test_demo_writes_a_report(cli, tmp_path):
    report = tmp_path / "demo.html"
    out = cli("demo", "--out", report, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["data"]["documents"] > 500
    assert all(split["exactly_once"] for split in doc["sharding"]["splits"])
    html = report.read_text()
    assert html.startswith("<!doctype html>") and "<svg" in html


def _listed(help_text, flag):
    """The names `shardkit pack --help` lists for --flag ("a | b (default) | c")."""
    line = next(x for x in help_text.splitlines() if x.strip().startswith("--" + flag + " "))
    choices = line.split("NAME", 1)[1].split(":")[0]
    return [c.replace("(default)", "").strip() for c in choices.split("|")]


def _expected(stderr):
    """The names an unknown-value error lists: '(expected a, b or c)'."""
    inside = stderr.split("(expected ", 1)[1].split(")")[0]
    return [x.strip() for x in inside.replace(" or ", ", ").split(",")]


@pytest.mark.parametrize(
    "flag, names, default",
    [
        ("algorithm", ["next_fit", "ffd", "bfd", "balanced", "histogram"], "bfd"),
        ("oversize", ["drop", "error", "split"], "drop"),
        ("compat", ["none", "trl"], "none"),
        ("cost", ["tokens", "squared"], "tokens"),
    ],
)
def test_pack_help_lists_exactly_the_names_the_parser_takes(cli, flag, names, default):
    help_text = cli("pack", "--help").stdout
    assert _listed(help_text, flag) == names
    assert f"{default} (default)" in help_text
    bad = cli(
        "pack", "--lengths", "-", "--capacity", 8, "--world", 2, f"--{flag}", "x", input="5\n"
    )
    assert bad.returncode == 2 and bad.stderr.startswith(f"shardkit pack: --{flag}: unknown "), (
        bad.stderr
    )
    assert _expected(bad.stderr) == names
    for name in names:
        args = ["--algorithm", "bfd"] if flag == "compat" else []
        r = cli(
            "pack",
            "--lengths",
            "-",
            "--capacity",
            8,
            "--world",
            2,
            *args,
            f"--{flag}",
            name,
            "--json",
            input="5\n3\n2\n",
        )
        assert r.returncode == 0, (name, r.stderr)


def test_pack_compat_trl_gives_trls_rows(cli):
    # Two packs with room 4 after the 6s: TRL's bfd puts the 3 into the first
    # (oldest) one, shardkit's default into the last filled one.
    trl = ["pack", "--lengths", "-", "--capacity", 10, "--compat", "trl"]
    r = cli(*trl, "--packs", "--json", input="6\n6\n3\n0\n")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["packs"] == [[0, 2], [1]] and doc["compat"] == "trl"
    assert doc["dropped_items"] == [3]  # TRL filters empty items out
    r = cli("pack", "--lengths", "-", "--capacity", 10, "--packs", "--json", input="6\n6\n3\n0\n")
    assert json.loads(r.stdout)["packs"] == [[0], [1, 2, 3]]
    assert json.loads(r.stdout)["compat"] == "none"
    human = cli(*trl, input="6\n6\n3\n")
    assert "bfd, compat trl" in human.stdout
    bad = cli(*trl, "--algorithm", "ffd", input="6\n")
    assert bad.returncode == 2 and bad.stderr.startswith("shardkit pack: --compat: trl reproduces")
