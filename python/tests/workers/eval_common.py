"""What the evaluation workers share (eval_torch_worker.py, eval_jax_worker.py):
the dynamic pass and the check of the static pass, against the same oracle
(every item once; the "model" maps item i to 3 i + 1), through the engine's
module (shardkit.torch or shardkit.jax)."""

import numpy as np


def dynamic_pass(engine, name, plan, rank, items, batch, array):
    """Keeps this rank's items not divisible by 3 (a filter decided at load
    time), agrees on the steps and sums them with a collective every step;
    asserts the sum is that of every kept item once. `array` turns a float64
    numpy array into the engine's."""
    mine = [int(i) for _, idx, m in plan.batches(rank) for i in idx[m]]
    kept = [i for i in mine if i % 3 != 0]
    steps = engine.agree_steps(len(kept), batch, plan)
    total = 0.0
    for step in range(steps):
        chunk = kept[step * batch : (step + 1) * batch]
        values = np.zeros(batch)
        values[: len(chunk)] = chunk
        s, _ = engine.global_masked_sum(array(values), np.arange(batch) < len(chunk))
        total += float(s)
    want = sum(i for i in range(items) if i % 3 != 0)
    assert total == want, (total, want)
    if rank == 0:
        print(f"OK {name} dynamic world={plan.world_size} steps={steps}", flush=True)


def check_static(engine, name, plan, rank, items, seen, preds):
    """After the static pass: every item counted once (`seen`), and this rank's
    predictions `preds` gathered and unsharded are the model's of every item,
    in order."""
    assert seen == items, seen
    ordered = engine.gather_unshard(plan, preds)
    assert ordered.tolist() == [3 * i + 1 for i in range(items)]
    if rank == 0:
        print(
            f"OK {name} static world={plan.world_size} steps={plan.num_steps} "
            f"padding={plan.total_padding}",
            flush=True,
        )
