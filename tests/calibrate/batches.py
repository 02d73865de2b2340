"""Batches the roofline tests price: decodes at given contexts, prefills of given lengths, one group each."""
from engine.core.batch import Batch


def decode(contexts):
    return Batch(decode_seq_ids=list(range(len(contexts))), decode_context_lens=list(contexts),
                 num_running_groups=len(contexts))


def prefill(lengths):
    return Batch(prefill_seq_ids=list(range(len(lengths))), prefill_lens=list(lengths),
                 prefill_sample_ids=[(i,) for i in range(len(lengths))], num_running_groups=len(lengths))
