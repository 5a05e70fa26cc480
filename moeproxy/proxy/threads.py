"""Run the proxy pipeline's small tensor work on one intra-op thread.

Expert signatures (32 probe rows against one expert at a time) and the verification forward (24
tokens) are made of thousands of tiny kernels. torch's intra-op pool splits each across threads and
pays a synchronisation per kernel; when other processes share the cores, waiting threads stall and
the work gets slower, not faster. Measured on the shared 2-core host (bench layout, two 64-expert
layers): signatures 1.7-1.8 s on one thread against 4.8-10.7 s on two; the verification forward
3.1 s against 12.5 s. The large work (reading and copying layers) does not use the pool at all.
``one_intra_op_thread()`` sets the pool to one thread for a block and restores it afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def one_intra_op_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
