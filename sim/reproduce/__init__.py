"""`servesim reproduce`: the paper's evaluation (Figs. 2 and 12-19) in one command, and a table of
where the simulation agrees with the paper's claims and where it does not.

figures.py   the registry: each figure's panels and the paper configs behind them (or whose cost model
             predicts them: predictions.py, Figs. 18a and 19a)
scale.py     the paper's trace lengths, or --quick's cut
runner.py    sweeps, figure folders, the table
panels.py    each panel kind's plotted numbers and drawing; paper_plots.py the whole figure
readings.py  sustainable rates and other readings, as intervals; results.py what the claims read
claims.yaml  the paper's claims, as data, each naming its reader; claims.py loads them
rate_claims.py, memory_claims.py, cost_claims.py
             the readers, one per kind of claim, by what they read: sustainable rates; KV memory,
             batching and sharing; block sizes and preemption
table.py     paper_vs_sim.csv/.md
"""
