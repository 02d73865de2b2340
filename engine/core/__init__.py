"""The control plane: pure Python, no torch. Both the real engine and the simulator run it.

Read it in the order a step runs: serving.py (ServingCore: start_step, end_step), scheduler/base.py
(the contract every scheduler keeps), scheduler/common.py (queues and completion), scheduler/vllm.py
(schedule(), preemption, the pool and its rows), block_manager.py (paged blocks),
kv_usage.py and records.py (what a step leaves). A simulator's decode stretch is k steps through the same
functions: docs/concepts/fast-forward.md.

Its modules may run compiled by mypyc (setup.py); compiled.py, imported here before any of them, decides
whether they do (docs/compiled.md).
"""
from engine.core import compiled as compiled
