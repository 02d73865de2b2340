"""Each part of an iteration priced: matmuls, attention, the all-reduce, a mixture's experts and the host's work,
and their carry to another GPU by regime."""
