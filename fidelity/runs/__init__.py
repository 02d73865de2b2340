"""A real serving run, read from its files, replayed exactly in the simulator, and compared with it.

Readers (one per format) return a RealRun (real_run.py): LLMServingSim's bench layout of a vLLM V1 run
(bench_layout.py) and vLLM's own `vllm bench serve --save-result --save-detailed` JSON (vllm_bench.py).
replay_trace.py turns it into the simulator's Trace, settings.py its engine settings into an Experiment,
simulated.py serves the one on the other, and comparison.py / report.py put the two side by side
(`servesim validate --run`, command.py). No torch on this path: the simulator runs without it.
"""
