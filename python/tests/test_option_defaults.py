"""Every edge's default of a loader option is the core's (LoaderOptions,
shardkit/loader/loader.h), read here through the binding: the Python loaders,
the torch datasets and the CLI spell none of their own."""

import inspect
import json

import numpy as np

import shardkit
from shardkit import _core


def _corpus(tmp_path, n=40):
    lengths = np.random.default_rng(3).integers(1, 90, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int32) % 1000
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    return tokens, offsets


def _default(function, name):
    return inspect.signature(function).parameters[name].default


def test_the_core_default_is_equal_steps_on():
    # The documented default of a training loader (docs/loader.md).
    assert _core._loader_option_defaults["equal_steps"] is True


def test_python_loader_defaults_are_the_cores(tmp_path):
    core = _core._loader_option_defaults["equal_steps"]
    assert _default(shardkit.TokenLoader, "equal_steps") == core
    assert _default(shardkit.TokenLoader.mixture, "equal_steps") == core
    tokens, offsets = _corpus(tmp_path)
    loader = shardkit.TokenLoader(tokens, offsets, seq_len=128, batch_size=2)
    # What the core holds for a loader given no equal_steps.
    assert loader.equal_steps == core and (loader.num_steps is not None) == core
    mixed = shardkit.TokenLoader.mixture(
        [(tokens, offsets), (tokens, offsets)], [1, 1], seq_len=128, batch_size=2
    )
    assert mixed.equal_steps == core


def test_torch_dataset_defaults_are_the_cores(tmp_path, torch):
    from shardkit.torch import ConstantLengthDataset, TokenDataset

    core = _core._loader_option_defaults["equal_steps"]
    assert _default(ConstantLengthDataset, "equal_steps") == core
    tokens, offsets = _corpus(tmp_path)
    ds = TokenDataset(tokens, offsets, seq_len=128, batch_size=2, rank=0, world_size=1)
    assert ds.equal_steps == core and ds.loader(0, 1).equal_steps == core


def test_cli_loader_default_is_the_cores(cli, tmp_path):
    _corpus(tmp_path)
    base = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    base += ["--seq-len", 128, "--batch", 2, "--world", 2, "--quiet", "--json"]
    core = _core._loader_option_defaults["equal_steps"]
    r = cli(*base)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["equal_steps"] is core
    r = cli(*base, "--per-rank")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["equal_steps"] is False
