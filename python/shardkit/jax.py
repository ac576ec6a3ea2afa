"""JAX adapters (the layout helpers live here too once merged).

Evaluation: ``check_plan``, ``agree_steps``, ``gather_unshard``, ``fail_fast``,
``psum_masked`` over JAX's processes; see shardkit._jax_eval.
"""

from shardkit._jax_eval import *  # noqa: F401,F403
