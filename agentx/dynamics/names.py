"""The names `agentx simulate` offers (admission policies, KV offload tiers, preemption modes),
in a module with no kernels: the command's options are made when it is imported, before a
first run may turn numba off (agentx/warm.py), so they cannot import the simulator's modules.
"""

from __future__ import annotations

POLICIES = ("greedy", "token-bucket", "pi")  # agentx.dynamics.admission
OFFLOAD = ("none", "dram", "dram+ssd")  # agentx.dynamics.agentic_setup
PREEMPTION = ("recompute", "swap")
