"""An iteration's work counted: a layer's operations, the experts a batch reads, the terms a profile is fitted on
and the features a host model multiplies."""
