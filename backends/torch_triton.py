"""``from posenc.backends import torch_triton as pe``: PyTorch with the fused Triton rotary kernel.

The public name of :mod:`posenc.backends.torch.triton_rope`, which lives in the torch home:
both names are one module object (state, monkeypatches and private helpers included).
"""

import sys

from .torch import triton_rope

sys.modules[__name__] = triton_rope
