"""State dicts: the named tensors of a model (any object holding Tensors in attributes, lists, tuples or dicts).

`get_state_dict(model)` names each tensor by its path (`layers.0.weight`), `get_parameters(model)` lists them, and
`load_state_dict(model, state)` checks every key and shape first and only then writes (never a partial model).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tg.tensor.tensor import Tensor


class StateDictError(KeyError):
    """The state dict does not fit the model: lists the missing, unexpected and mis-shaped keys."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from obj, keyed by its dotted path, in attribute (and list) order."""
    if isinstance(obj, Tensor):
        return {prefix.rstrip("."): obj}
    items: Iterable[tuple[Any, Any]]
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = vars(obj).items()
    else:
        return {}
    state: dict[str, Tensor] = {}
    for name, value in items:
        state.update(get_state_dict(value, f"{prefix}{name}."))
    return state


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of get_state_dict(obj), each once."""
    return list({id(t): t for t in get_state_dict(obj).values()}.values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, realize: bool = True) -> None:
    """Write state_dict's tensors into the model's (cast to the model's dtype and device).

    Raises StateDictError naming every missing (strict only), unexpected (strict only) and mis-shaped key before
    anything is written."""
    model_state = get_state_dict(model)
    missing = [key for key in model_state if key not in state_dict]
    unexpected = [key for key in state_dict if key not in model_state]
    mis_shaped = [
        f"{key}: model {model_state[key].shape}, state dict {tuple(value.shape)}"
        for key, value in state_dict.items()
        if key in model_state and tuple(value.shape) != model_state[key].shape
    ]
    problems = []
    if strict and missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected)}")
    if mis_shaped:
        problems.append(f"shape mismatch: {'; '.join(mis_shaped)}")
    if problems:
        raise StateDictError("state dict does not fit the model: " + " | ".join(problems))
    written = []
    for key, target in model_state.items():
        if key in state_dict:
            value = state_dict[key]
            written.append(target.assign(value.to(target.device).cast(target.dtype)))
    if realize and written:
        Tensor.realize(*written)
