"""PyTorch on one thread, for oracles of duplicated positions: its CPU max_unpool splits a
plane's input positions between threads that store without order, and its pool backward
adds from several threads into one element (aten/src/ATen/native/cpu/MaxUnpoolKernel.cpp,
MaxPoolKernel.cpp), so on more threads which duplicate wins, or the order of a sum, is
unspecified. On one thread both follow the input order."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
