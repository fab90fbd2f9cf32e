"""The porting guide's code (docs/porting.md), run as the page shows it: its Equinox, Flax
NNX and Flax Linen ports of a PyTorch SegNet give PyTorch's logits and gradients (input,
every weight and bias) on a 37x45 batch, odd sizes that need the unpools' output_size;
and the page's own check catches a classic porting mistake."""

from __future__ import annotations

import doc_examples
import numpy as np
import pytest
import torch_oracle

# The page ports a PyTorch model and compares with it: every test needs torch.
pytest.importorskip("torch", reason=torch_oracle.MISSING)

PORTS = ["eqx", "nnx", "linen"]


@pytest.fixture(scope="module")
def page() -> dict:
    """What the page's blocks defined, run in order in one namespace."""
    namespace = {"__name__": "__main__"}
    doc_examples.run_blocks(doc_examples.parse(doc_examples.ROOT / "docs" / "porting.md"),
                            namespace)
    return namespace


@pytest.mark.parametrize("port", PORTS)
def test_the_port_gives_pytorchs_logits_on_an_odd_size(page, port):
    assert page["images"].shape == (2, 3, 37, 45)
    logits = page[f"{port}_logits"]
    assert logits.shape == page["torch_logits"].shape == (2, 4, 37, 45)
    np.testing.assert_allclose(logits, page["torch_logits"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("port", PORTS)
def test_the_port_gives_pytorchs_gradients(page, port):
    grads, expected = page[f"{port}_grads"], page["torch_grads"]
    assert grads.keys() == expected.keys() and len(expected) == 9  # input, 4 weights, 4 biases
    for name, want in expected.items():
        assert grads[name].shape == want.shape, name
        np.testing.assert_allclose(grads[name], want, rtol=0, atol=1e-5 * np.abs(want).max(),
                                   err_msg=name)


def test_the_pages_check_catches_kernels_copied_with_h_and_w_swapped(page):
    # The same shapes for 3x3 kernels, so nothing but the values can tell.
    params = page["flax_params"](page["weights"])
    swapped = {"params": {name: {"kernel": conv["kernel"].transpose(1, 0, 2, 3),
                                 "bias": conv["bias"]} for name, conv in params.items()}}
    logits, (param_grads, image_grads) = page["linen_logits_and_grads"](
        swapped, page["images_nhwc"], page["labels"])
    logits, grads = page["torch_layout"](logits, image_grads, param_grads["params"])
    assert not page["same_as_torch"](logits, grads)
    assert page["same_as_torch"](page["linen_logits"], page["linen_grads"])
