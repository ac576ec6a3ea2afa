"""The CLI's reports say what their numbers are (issue 26): file counts of a
mixture, realised shares split at a change of weights, the demo's samples vs
tokens, round chart ticks. Each test is named after what was wrong."""

import json
import re

import numpy as np
import pytest


def write_part(path_stem, docs, low, high, rng):
    lengths = rng.integers(low, high, docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(f"{path_stem}.tokens.npy", rng.integers(0, 1000, offsets[-1]).astype(np.int32))
    np.save(f"{path_stem}.offsets.npy", offsets)


@pytest.fixture
def three_sources(tmp_path):
    """5 files in 3 sources: web/ (2 parts), code (1 pair), math/ (2 parts)."""
    rng = np.random.default_rng(3)
    for name in ("web", "math"):
        (tmp_path / name).mkdir()
        for p in range(2):
            write_part(tmp_path / name / f"p{p}", 300, 20, 600, rng)
    write_part(tmp_path / "code", 400, 50, 1200, rng)
    spec = ",".join(
        [str(tmp_path / "web"), f"{tmp_path}/code.tokens.npy:{tmp_path}/code.offsets.npy"]
        + [str(tmp_path / "math")]
    )
    return spec


COMMON = ("--seq-len", "4096", "--batch", "8", "--quiet")


def test_regression_mixture_of_five_files_said_one_file(cli, three_sources):
    out = cli("loader-stats", "--mixture", three_sources, "--weights", "6,3,1", *COMMON)
    assert out.returncode == 0, out.stderr
    assert " tokens in 5 file(s);" in out.stdout.splitlines()[0], out.stdout
    out = cli("loader-stats", "--mixture", three_sources, "--weights", "6,3,1", *COMMON, "--json")
    assert json.loads(out.stdout)["files"] == 5


def test_regression_resume_with_new_weights_mixed_old_and_new_shares(cli, three_sources, tmp_path):
    state = tmp_path / "m.json"
    first = cli(
        "loader-stats", "--mixture", three_sources, "--weights", "6,3,1", *COMMON,
        "--world", "4", "--max-batches", "1", "--save-state", state,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    args = ("loader-stats", "--mixture", three_sources, "--weights", "2,2,6", *COMMON)
    args += ("--world", "3", "--resume", state)
    text = cli(*args)
    assert text.returncode == 0, text.stderr
    assert "before the change:" in text.stdout and "after the change:" in text.stdout
    j = json.loads(cli(*args, "--json").stdout)["mixture"]
    assert j["changed"]
    before, after, everything = j["before_change"], j["after_change"], j["sources"]
    # Targets: the weights each side was drawn with.
    assert [s["target"] for s in before] == pytest.approx([0.6, 0.3, 0.1])
    assert [s["target"] for s in after] == pytest.approx([0.2, 0.2, 0.6])
    # The new side follows the new weights (per-block rounding and document
    # lengths: within 0.05); the whole run does not (it mixes the two).
    assert [s["realised"] for s in after] == pytest.approx([0.2, 0.2, 0.6], abs=0.05)
    assert [s["realised"] for s in everything] != pytest.approx([0.2, 0.2, 0.6], abs=0.05)
    # The two sides are the whole run, split.
    for key in ("tokens", "documents"):
        assert [b[key] + a[key] for b, a in zip(before, after)] == [s[key] for s in everything]


@pytest.fixture(scope="module")
def demo_html(tmp_path_factory):
    import subprocess

    from conftest import cli_path

    path = tmp_path_factory.mktemp("demo") / "demo.html"
    out = subprocess.run(
        [cli_path(), "demo", "--out", str(path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return path.read_text()


def test_regression_chart_ticks_were_unrounded(demo_html):
    charts = 0
    for svg in re.findall(r"<svg.*?</svg>", demo_html):
        labels = re.findall(r"<text x='56.0' y='[^']*' text-anchor='end'>([^<]*)</text>", svg)
        if not labels:
            continue
        charts += 1
        values = [float(v[:-1]) * {"k": 1e3, "M": 1e6}[v[-1]] if v[-1] in "kM" else float(v)
                  for v in labels]  # fmt: skip
        step = values[1] - values[0]
        assert values == pytest.approx([step * t for t in range(len(values))]), labels
        mantissa = step / 10 ** np.floor(np.log10(step))
        assert min(abs(mantissa - m) for m in (1, 2, 2.5, 5)) < 1e-9, labels
    assert charts >= 4


def test_regression_demo_mixing_showed_sample_shares_beside_token_shares(demo_html):
    section = demo_html[demo_html.index("<h2>Mixing") :]
    section = section[: section.index("</section>")]
    assert "Token share of each source" in section
    assert "<th>target share of samples</th><th>realised share of samples</th>" in section
    assert "the table counts <em>samples</em>" in section
