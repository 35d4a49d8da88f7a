"""tg.tensor.nn: layers, state dicts and (in tg.tensor.nn.optim) optimizers, with tinygrad's names.

`from tg.tensor import nn; layer = nn.Linear(3, 4); opt = nn.optim.Adam(nn.state.get_parameters(layer))`.
"""

from tg.tensor.nn import optim
from tg.tensor.nn import state_dict as state
from tg.tensor.nn.layers import (
    BatchNorm,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose1d,
    ConvTranspose2d,
    Embedding,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    LayerNorm2d,
    Linear,
    LSTMCell,
    RMSNorm,
)
from tg.tensor.nn.state_dict import StateDictError, get_parameters, get_state_dict, load_state_dict

__all__ = [
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LSTMCell",
    "LayerNorm",
    "LayerNorm2d",
    "Linear",
    "RMSNorm",
    "StateDictError",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "optim",
    "state",
]
