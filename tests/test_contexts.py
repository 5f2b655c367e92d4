"""Each row of ``frameworks``' contexts that let every exception of their body through, run: a
``with`` of it around a ``raise`` raises (the analysis takes an assignment in such a body for made
on every path past the ``with``)."""

import warnings

import pytest

from gradfix.codemods.frameworks import EXCEPTION_KEEPING_CONTEXTS, EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS

torch = pytest.importorskip("torch")


class _Raised(Exception):
    pass


# What each context is entered with here (autocast on the CPU; gradients turned off).
_ARGUMENTS = {"torch.set_grad_enabled": (False,), "torch.autocast": ("cpu",), "torch.amp.autocast": ("cpu",)}


def _context(qualified: str):
    target = torch
    for part in qualified.split(".")[1:]:
        target = getattr(target, part)
    return target(*_ARGUMENTS.get(qualified, ()))


@pytest.mark.parametrize("qualified", sorted(EXCEPTION_KEEPING_CONTEXTS))
def test_a_torch_context_lets_its_bodys_exception_through(qualified):
    with pytest.raises(_Raised):
        with _context(qualified):
            raise _Raised


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
