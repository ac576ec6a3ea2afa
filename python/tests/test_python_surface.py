"""The Python package as one surface: one rank source, no import cycle, no
private name crossing modules, complete ``__all__``, DESIGN.md's names."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import shardkit

PACKAGE = Path(shardkit.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
ENGINES = {"torch", "_torch_eval", "_torch_loader", "_torch_packing", "jax", "_jax_eval"}


def _tree(name):
    path = PACKAGE / ("__init__.py" if name == "shardkit" else f"{name}.py")
    return ast.parse(path.read_text(), str(path))


def _shardkit_imports(tree):
    """(module imported, [names imported from it]) for every import of a
    shardkit module anywhere in the file (top level or inside a function)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "shardkit":
                for alias in node.names:  # from shardkit import eval as _ev
                    yield f"shardkit.{alias.name}", []
            elif node.module.startswith("shardkit."):
                yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("shardkit."):
                    yield alias.name, []


def test_the_package_has_no_import_cycle():
    graph = {}
    for name in ["shardkit", *MODULES]:
        full = "shardkit" if name == "shardkit" else f"shardkit.{name}"
        graph[full] = {
            m for m, _ in _shardkit_imports(_tree(name)) if m != "shardkit._core" and m != full
        }
    state = {}

    def visit(node, path):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", "import cycle: " + " -> ".join([*path, node])
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if nxt != "shardkit":  # importing the package itself is the package's job
                visit(nxt, [*path, node])
        state[node] = "done"

    for node in sorted(graph):
        visit(node, [])


def test_no_private_name_crosses_modules():
    """A module imports only public names from another module; the compiled
    module's underscore hooks are reached as ``_core._name``, never imported."""
    offenders = []
    for name in ["shardkit", *MODULES]:
        tree = _tree(name)
        for module, names in _shardkit_imports(tree):
            offenders += [f"{name}: from {module} import {n}" for n in names if n.startswith("_")]
        aliases = {
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "shardkit"
            for a in node.names
            if a.name != "_core"
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
            ):
                offenders.append(f"{name}: {node.value.id}.{node.attr}")
    assert offenders == []


def _module(name):
    if name in ENGINES:
        pytest.importorskip("jax" if "jax" in name else "torch")
    return importlib.import_module(f"shardkit.{name}")


@pytest.mark.parametrize("name", MODULES)
def test_all_is_complete(name):
    """Every public class or function a module holds is in its ``__all__``,
    unless it is the same object another public module exports; every name of
    ``__all__`` exists."""
    module = _module(name)
    assert hasattr(module, "__all__"), f"shardkit.{name} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__)
    for exported in module.__all__:
        assert hasattr(module, exported), f"shardkit.{name}.__all__ names missing {exported}"
    elsewhere = set()
    for other in MODULES:
        if other != name and not other.startswith("_") and other not in ENGINES - {"torch", "jax"}:
            try:
                mod = _module(other)
            except pytest.skip.Exception:
                continue
            elsewhere |= {id(getattr(mod, n)) for n in getattr(mod, "__all__", [])}
    missing = []
    for attr, value in vars(module).items():
        if attr.startswith("_") or inspect.ismodule(value):
            continue
        if not (inspect.isclass(value) or inspect.isfunction(value) or callable(value)):
            continue
        owner = getattr(value, "__module__", "") or ""
        if not owner.startswith("shardkit"):
            continue
        if owner != module.__name__ and id(value) in elsewhere:
            continue
        if attr not in module.__all__:
            missing.append(attr)
    assert missing == [], f"shardkit.{name}.__all__ lacks {missing}"


def test_the_names_of_the_design_work_from_shardkit():
    for name in [
        "ShardPlan",
        "Shard",
        "pack",
        "Packing",
        "Mesh",
        "PartitionSpec",
        "NamedSharding",
        "EvalPlan",
        "TokenLoader",
        "discover",
        "whale_plan",
    ]:
        assert name in shardkit.__all__ and hasattr(shardkit, name), name
    for area in ("sharding", "packing", "eval", "layout", "loader"):
        assert importlib.import_module(f"shardkit.{area}").__all__
    plan = shardkit.ShardPlan(10, 4, remainder="pad")
    shard = plan.shard(3)
    assert (len(shard), shard.padding, shard.mask().tolist()) == (3, 1, [True, True, False])
    assert plan.audit().exactly_once
    mod = [m.name for m in pkgutil.iter_modules([str(PACKAGE)])]
    assert "evaluation" not in mod and "whale" not in mod  # one module per area


def test_one_spelling_for_state_and_padding():
    """state_dict / load_state_dict wherever state exists; padding(rank) is a
    per-rank count on both plans (Shard.padding that of one shard), and
    EvalPlan.total_padding the total."""
    from shardkit import EvalPlan, ShardPlan, StreamingPacker, TokenLoader

    for cls in (StreamingPacker, TokenLoader):
        assert hasattr(cls, "state_dict") and hasattr(cls, "load_state_dict")
        assert not hasattr(cls, "state"), cls
    ev = EvalPlan(10, 3, 2)
    sp = ShardPlan(10, 4, remainder="pad")
    assert ev.total_padding == sum(ev.padding(r) for r in range(3)) == 2
    assert [ev.padding(r) for r in range(3)] == [0, 1, 1]
    assert [sp.padding(r) for r in range(4)] == [sp.shard(r).padding for r in range(4)]
    assert [sp.padding(r) for r in range(4)] == [0, 0, 1, 1]


ENVIRONMENTS = [
    {"SLURM_PROCID": "2", "SLURM_NTASKS": "3", "SLURM_LOCALID": "0"},
    {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"},
    {"PMI_RANK": "2", "PMI_SIZE": "4"},
    {"RANK": "1", "WORLD_SIZE": "2"},
]


@pytest.mark.parametrize("environ", ENVIRONMENTS, ids=lambda e: next(iter(e)))
def test_every_class_finds_the_same_rank(monkeypatch, environ):
    """shardkit.discover() is the only rank source: every class that takes
    rank=None / world_size=None finds the launcher's rank and world."""
    torch_adapters = pytest.importorskip("shardkit.torch")
    for var in [v for e in ENVIRONMENTS for v in e]:
        monkeypatch.delenv(var, raising=False)
    for var, value in environ.items():
        monkeypatch.setenv(var, value)
    expected = shardkit.discover()
    assert expected.source != "default"
    want = (expected.rank, expected.world_size)
    tokens, offsets = np.arange(40, dtype=np.int32), np.arange(0, 41, 5)
    samples = [{"input_ids": list(range(n))} for n in (3, 5, 2, 7)]
    found = {
        "TokenLoader": shardkit.TokenLoader(tokens, offsets, seq_len=8, batch_size=1),
        "TokenDataset": torch_adapters.TokenDataset(tokens, offsets, seq_len=8, batch_size=1),
        "ConstantLengthDataset": torch_adapters.ConstantLengthDataset(samples, seq_len=8),
        "ShardedIterableDataset": torch_adapters.ShardedIterableDataset(list(range(10))),
    }
    sampler = torch_adapters.DistributedSampler(list(range(10)))
    assert (sampler.rank, sampler.num_replicas) == want
    for name, obj in found.items():
        assert (obj.rank, obj.world_size) == want, name
    assert shardkit.rank_and_world() == want
    assert shardkit.rank_and_world(0) == (0, want[1])


def _core_docstrings():
    """(name, docstring) of the compiled module, its classes and their members."""
    from shardkit import _core

    yield "shardkit._core", _core.__doc__
    for name, value in sorted(vars(_core).items()):
        yield f"shardkit._core.{name}", getattr(value, "__doc__", None)
        if inspect.isclass(value):
            for attr, member in sorted(vars(value).items()):
                yield f"shardkit._core.{name}.{attr}", getattr(member, "__doc__", None)


def test_binding_docstring_examples_run():
    """The >>> examples of the bound classes (written in python/src/*.cc) run as
    tests; pytest's --doctest-modules does not collect an extension module."""
    import doctest

    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(verbose=False)
    documented = []
    for name, doc in _core_docstrings():
        if not isinstance(doc, str) or ">>>" not in doc:
            continue
        test = parser.get_doctest(doc, {}, name, None, 0)
        runner.run(test)
        documented.append(name.rsplit(".", 1)[-1])
    results = runner.summarize(verbose=False)
    assert results.failed == 0
    for cls in (
        "AuditReport",
        "RankSchedule",
        "WhaleChoice",
        "LocalToGlobal",
        "NamedSharding",
        "TrainSummary",
        "TrainAudit",
        "TrainStep",
    ):
        assert cls in documented, cls


def test_results_are_read_only_classes_with_a_repr():
    from shardkit import balance_ranks, whale_choice

    report = shardkit.ShardPlan(7, 3, remainder="drop").audit()
    schedule = balance_ranks([5, 4, 3, 2, 1], 2, drop_last=True)
    choice = whale_choice(7, 3, env={"WHALE_DROP_LAST_FILES": "yes"})
    mapping = shardkit.NamedSharding(
        shardkit.Mesh({"x": 2}, owners=[0, 1]), shardkit.PartitionSpec("x")
    ).local_to_global((3,), 1)
    for result, attribute in [
        (report, "exactly_once"),
        (schedule, "num_steps"),
        (choice, "remainder"),
        (mapping, "global_shape"),
    ]:
        assert not isinstance(result, dict)
        assert repr(result).startswith(type(result).__name__ + "(")
        with pytest.raises(AttributeError):
            setattr(result, attribute, None)
    assert (report.exactly_once, report.dropped, report.delivered, report.padding) == (
        True,
        1,
        6,
        0,
    )
    assert schedule.assignment.tolist() == [[[0], [1]], [[3], [2]]]
    assert schedule.dropped_packs.tolist() == [4] and schedule.padding_packs == 0
    assert not schedule.assignment.flags.writeable
    assert (choice.remainder, choice.shuffle) == ("drop", False) and choice.reason
    assert mapping.global_shape == (6,) and mapping.devices.tolist() == [1]
    assert mapping.global_slices.tolist() == [[[3, 6]]]


def test_the_generated_stub_names_its_types():
    """_core.pyi (generated at build) says object or a bare dict/list/tuple only
    where the binding has a reason: duck-typed JAX objects and __eq__."""
    import re

    stub = PACKAGE / "_core.pyi"
    if not stub.exists():
        pytest.skip("no generated stub beside the module (not a development build)")
    untyped = [
        line.strip()
        for line in stub.read_text().splitlines()
        if line.strip().startswith("def ")
        and re.search(r"\b(object|dict|list|tuple)\b(?![\[(])", line)
    ]
    allowed = ("def from_jax(", "def __eq__(self, arg: object, /)")
    assert [line for line in untyped if not line.startswith(allowed)] == []


def test_one_way_to_wrap_a_bound_class():
    """A public class is the bound class itself, re-exported by its area module;
    no Python class subclasses a bound one. (TokenLoader and StreamingPacker are
    Python classes that own a private engine, _core._TokenLoader and
    _core._StreamingPacker, which they rebuild on set_epoch / load_state_dict.)"""
    from shardkit import _core

    bound = {v for v in vars(_core).values() if inspect.isclass(v)}
    for name in MODULES:
        module = _module(name)
        for exported in module.__all__:
            value = getattr(module, exported)
            if not inspect.isclass(value) or value in bound:
                continue
            wrapped = [base.__name__ for base in value.__mro__[1:] if base in bound]
            assert wrapped == [], f"shardkit.{name}.{exported} subclasses {wrapped}"
    assert shardkit.EvalPlan is _core.EvalPlan and shardkit.ShardPlan is _core.ShardPlan
