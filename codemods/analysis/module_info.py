"""What gradfix knows of a name bound to an ``nn.Module`` instance: its class, whether it may train,
and what calling it returns."""

from __future__ import annotations

from dataclasses import dataclass

from ..summaries import ExportedModuleClass
from ..torch_api import PARAMETERLESS_MODULES
from .values import TENSOR, UNKNOWN, Structure, TupleOf

# What calling a recurrent module returns, so tuple state can be detached element by element.
_RECURRENT_RESULTS: dict[str, Structure] = {
    "LSTM": TupleOf((TENSOR, TupleOf((TENSOR, TENSOR)))),
    "GRU": TupleOf((TENSOR, TENSOR)),
    "RNN": TupleOf((TENSOR, TENSOR)),
    "LSTMCell": TupleOf((TENSOR, TENSOR)),
    "GRUCell": TENSOR,
    "RNNCell": TENSOR,
}


@dataclass(frozen=True)
class ModuleInfo:
    """A name bound to an nn.Module instance."""

    class_name: str  # the class's short name, e.g. "LSTM", or "" when unknown
    is_local: bool = False  # a class defined in the same file
    frozen: bool = False  # its parameters were set not to require grad
    # Frozen in one place and its gradients turned on again in another (a GAN's discriminator,
    # frozen for the generator's step): a call may add its parameters to a graph, or not.
    toggled: bool = False
    # Known to be a module only by how it is used (``model.parameters()``, an ``nn.Module``
    # annotation): its class, so its forward, is code gradfix did not read.
    unread: bool = False
    # A class of another module of the project (``class_name`` is then its qualified name, which
    # names no torch.nn class): what that module's analysis proved of it.
    project: ExportedModuleClass | None = None

    @property
    def trainable(self) -> bool:
        """Whether calling it may add parameters to a graph: not when it is frozen, or a torch.nn
        class without parameters (an activation, a pooling, a loss); a class of the file's own
        or of the project may hold parameters whatever its name."""
        parameterless = not self.is_local and self.project is None and self.class_name in PARAMETERLESS_MODULES
        return not (self.frozen or parameterless)

    @property
    def call_result(self) -> Structure:
        """What calling a torch.nn module of this class returns (a project's class: not known)."""
        if self.project is not None:
            return UNKNOWN
        if self.class_name in _RECURRENT_RESULTS:
            return _RECURRENT_RESULTS[self.class_name]
        return TENSOR if self.class_name else UNKNOWN
