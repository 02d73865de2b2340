"""The workload's beam searches: how often a surviving candidate continues its own beam (workload.beam_continue,
the one parameter of the simulator's parent choice, sim/core/beams.py).

DEFAULT_BEAM_CONTINUE was fitted once, on Alpaca-shaped lengths (alpaca-standin), to the memory
saving the paper reports for beam search there (Fig. 15: 37.6% at width 2 to 55.2% at width 6):
0.93 gives 36.5%, 51.0% and 56.3% at widths 2, 4 and 6. It was not refitted for ShareGPT, which lands
at 46.2%, 67.5% and 75.0% (the paper: 44.3%-66.3%). research/paper/beam_saving.py --fit refits and
reports both; benchmarks/measurements/beam_saving.md records the run.
"""

DEFAULT_BEAM_CONTINUE = 0.93
