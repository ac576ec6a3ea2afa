"""The collectives of W ranks as W threads of one process, for the tests of
the eval helpers (check_plan, gather_unshard, ...) without a launcher: a
barrier per collective; engine(g) is rank g's view."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np


class ThreadEngines:
    def __init__(self, world):
        self.world, self.table = world, [None] * world
        self.barrier = threading.Barrier(world, timeout=60)

    def engine(self, rank):
        outer = self

        class Engine:
            world_size = outer.world

            def _gather(self, value):
                outer.table[rank] = value
                outer.barrier.wait()
                out = list(outer.table)
                outer.barrier.wait()
                return out

            def allgather_int64(self, values):
                return np.stack(self._gather(np.asarray(values, np.int64)))

            def allgather_rows(self, local):
                return self._gather(local)

        e = Engine()
        e.rank = rank
        return e

    def run(self, fn):
        """fn(rank) on every rank at once; returns the results (or raises the first error)."""
        with ThreadPoolExecutor(self.world) as pool:
            return [f.result(timeout=120) for f in [pool.submit(fn, g) for g in range(self.world)]]
