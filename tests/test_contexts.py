"""Each row of ``frameworks``' contexts that let every exception of their body through, run: a
``with`` of it around a ``raise`` raises (the analysis takes an assignment in such a body for made
on every path past the ``with``); and each row of those that may swallow one, run: it does.
"""

import importlib
import warnings

import pytest

from gradfix.codemods.frameworks import EXCEPTION_KEEPING_CONTEXTS, EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS, EXCEPTION_SWALLOWING_CONTEXTS

torch = pytest.importorskip("torch")


class _Raised(Exception):
    pass


# What each context is entered with here (autocast on the CPU; gradients turned off).
_ARGUMENTS = {"torch.set_grad_enabled": (False,), "torch.autocast": ("cpu",), "torch.amp.autocast": ("cpu",), "contextlib.suppress": (_Raised,)}


def _context(qualified: str):
    root, *parts = qualified.split(".")
    target = importlib.import_module(root)
    for part in parts:
        target = getattr(target, part)
    return target(*_ARGUMENTS.get(qualified, ()))


@pytest.mark.parametrize("qualified", sorted(EXCEPTION_KEEPING_CONTEXTS))
def test_a_torch_context_lets_its_bodys_exception_through(qualified):
    with pytest.raises(_Raised):
        with _context(qualified):
            raise _Raised


@pytest.mark.parametrize("qualified", sorted(EXCEPTION_SWALLOWING_CONTEXTS))
def test_a_swallowing_context_may_end_its_body_early_without_an_error(qualified):
    with _context(qualified):
        raise _Raised  # (swallowed: the body ends here, and the code after the ``with`` runs)


def _framework_object(kind: str):
    model = torch.nn.Linear(2, 2)
    if kind == "accelerator":
        accelerate = pytest.importorskip("accelerate")
        accelerator = accelerate.Accelerator(cpu=True)
        return accelerator, accelerator.prepare(model)
    fabric_package = pytest.importorskip("lightning_fabric")
    fabric = fabric_package.Fabric(accelerator="cpu", devices=1)
    return fabric, fabric.setup(model)


@pytest.mark.parametrize(("kind", "method"), sorted(EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS))
def test_a_framework_objects_context_lets_its_bodys_exception_through(kind, method):
    framework, model = _framework_object(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        context = getattr(framework, method)(model) if method in ("accumulate", "no_sync", "no_backward_sync") else getattr(framework, method)()
    with pytest.raises(_Raised):
        with context:
            raise _Raised
