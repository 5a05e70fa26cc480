"""threads: one intra-op thread inside the block, the previous setting restored after it."""

from __future__ import annotations

import pytest
import torch

from moeproxy.proxy.threads import one_intra_op_thread


def test_one_thread_inside_and_restored_after_an_error():
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError):
            with one_intra_op_thread():
                assert torch.get_num_threads() == 1
                raise RuntimeError("boom")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(2)
