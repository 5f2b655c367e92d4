"""Every framework gradfix knows, as rows of tables: how each one backwards a graph, how its objects
are built and handed back, which hooks a trainer runs and what it does with them, how optimizers
step and gradients are clipped, which contexts scale a loss or turn gradients off.

A new framework is rows here and a fixture folder (``docs/contributing.md``). The analysis reads
these tables and never spells a framework's names itself.

Backwarding. A rule never matches ``.backward`` by name: it asks a ``BackwardSite`` which tensors a
call backwards, whether it keeps the graph (``retain_graph``: true, false, or an expression gradfix
cannot evaluate) and how to write the same call for another tensor. The calls are:

* ``loss.backward(...)``, and ``scaler.scale(loss).backward(...)`` (AMP's ``GradScaler``);
* ``torch.autograd.backward(tensors, ...)`` and ``torch.autograd.grad(outputs, inputs, ...)``,
  positional or keyword;
* framework calls whose *argument* is the tensor: Accelerate's ``accelerator.backward(loss)``,
  Lightning Fabric's ``fabric.backward(loss)``, a LightningModule's ``self.manual_backward(loss)``,
  DeepSpeed's ``engine.backward(loss)`` and optimizer wrappers' ``optimizer.backward(loss)``;
* functions and methods of the checked code whose body backwards one of their parameters
  (``BackwardApi.of_function``);
* the hooks whose result a trainer backwards (``TRAINER_HOOKS``): a LightningModule's
  ``training_step``, a Hugging Face Trainer's ``compute_loss``.

``x.backward(arg)`` is a tensor's backward when ``x`` may carry a graph or ``arg`` is proved to
carry none (a tensor's own first argument is its gradient), a wrapper's when ``x`` is an object
gradfix knows, and otherwise a guess (``guessed``) that findings may state and fixes never use.

Plain data: this module never loads LibCST (its rows cross processes, are read back from the cache,
and the text prefilter in ``source`` reads the trainer hooks); ``analysis.backward_calls`` reads and
rewrites calls by the backward rows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

# Backwarding ---------------------------------------------------------------------------------------

RECEIVER = -1  # the tensor is the object the method is called on

# retain_graph as gradfix can read it: True, False, or None for an expression it cannot evaluate.
Tristate = Optional[bool]


@dataclass(frozen=True)
class BackwardApi:
    """One row of the table: a call shape that backwards a graph."""

    name: str  # as users write it, for messages
    tensor_position: int  # where the backwarded tensor is among the arguments, or RECEIVER
    tensor_keyword: str | None = None
    retain_position: int | None = None  # positional place of retain_graph, if it has one
    accumulates: bool = True  # writes into .grad (autograd.grad returns the gradients instead)
    # DeepSpeed's and Lightning's own defaults are False too; a function of the checked code keeps
    # the graph as the backward inside it does (None: gradfix cannot tell).
    retains_by_default: Tristate = False
    scaled: bool = False  # ``scaler.scale(loss).backward()``: the tensor is the argument of scale()
    # Does more than autograd per call (DeepSpeed: loss scaling, reduction at the accumulation
    # boundary, ZeRO hooks): two calls that run are not one call on the sum.
    keeps_books: bool = False
    # gradfix could not tell which tensor the call backwards (``x.backward(y)`` on an object it does
    # not know): findings may say what it guessed, fixes never rest on it.
    guessed: bool = False
    # A function of the checked code that backwards its parameter (``of_function``): a call of it
    # runs the rest of its body too (an optimizer's step, a read of the gradients).
    function: bool = False

    @property
    def takes_tensor_argument(self) -> bool:
        return self.tensor_position != RECEIVER

    @classmethod
    def of_function(cls, name: str, position: int, keyword: str, inner: "BackwardApi", retains: Tristate) -> "BackwardApi":
        """A function of the checked code that backwards its parameter ``keyword`` by the call
        ``inner``, which keeps the graph as ``retains`` says."""
        return cls(f"{name}()", position, keyword, accumulates=inner.accumulates, retains_by_default=retains, guessed=inner.guessed, function=True)


TENSOR_BACKWARD = BackwardApi("Tensor.backward", RECEIVER, retain_position=1)
SCALED_BACKWARD = BackwardApi("GradScaler.scale(...).backward", RECEIVER, retain_position=1, scaled=True)
AUTOGRAD_BACKWARD = BackwardApi("torch.autograd.backward", 0, "tensors", retain_position=2)
AUTOGRAD_GRAD = BackwardApi("torch.autograd.grad", 0, "outputs", retain_position=3, accumulates=False)
ACCELERATE_BACKWARD = BackwardApi("Accelerator.backward", 0, "loss")
FABRIC_BACKWARD = BackwardApi("Fabric.backward", 0, "tensor")
LIGHTNING_MANUAL_BACKWARD = BackwardApi("LightningModule.manual_backward", 0, "loss")
DEEPSPEED_BACKWARD = BackwardApi("DeepSpeedEngine.backward", 0, "loss", retain_position=1, keeps_books=True)
WRAPPER_BACKWARD = BackwardApi("<wrapper>.backward", 0, "loss")  # optimizer.backward(loss) and the like
GUESSED_WRAPPER_BACKWARD = BackwardApi("<wrapper>.backward", 0, "loss", guessed=True)

FUNCTION_APIS = {
    "torch.autograd.backward": AUTOGRAD_BACKWARD,
    "torch.autograd.grad": AUTOGRAD_GRAD,
}
# What a framework object's ``backward(tensor)`` is, by the kind of object (``FRAMEWORK_CONSTRUCTORS``).
FRAMEWORK_APIS = {
    "accelerator": ACCELERATE_BACKWARD,
    "fabric": FABRIC_BACKWARD,
    "deepspeed": DEEPSPEED_BACKWARD,
}
BACKWARD_METHOD = "backward"  # a tensor's, a framework object's, a wrapper's
MANUAL_BACKWARD_METHOD = "manual_backward"  # a LightningModule's (``LIGHTNING_MANUAL_BACKWARD``)
BACKWARD_METHODS = {BACKWARD_METHOD, MANUAL_BACKWARD_METHOD}
# ``scaler.scale(loss)``: the tensor a ``SCALED_BACKWARD`` backwards is this method's one argument.
SCALING_METHOD = "scale"
# The keywords of ``Tensor.backward``: any other keyword names a wrapper's tensor argument.
TENSOR_BACKWARD_KEYWORDS = {"gradient", "retain_graph", "create_graph", "inputs"}

# Framework objects -----------------------------------------------------------------------------------

# Classes whose instances backward a tensor passed to them: ``accelerator.backward(loss)``.
FRAMEWORK_CONSTRUCTORS = {
    "accelerate.Accelerator": "accelerator",
    "accelerate.accelerator.Accelerator": "accelerator",
    "lightning.Fabric": "fabric",
    "lightning.fabric.Fabric": "fabric",
    "lightning.fabric.fabric.Fabric": "fabric",
    "lightning_fabric.Fabric": "fabric",
    "lightning_fabric.fabric.Fabric": "fabric",
}
# Functions returning a tuple whose first element is such an object (and whose second is an optimizer).
FRAMEWORK_TUPLE_CONSTRUCTORS = {"deepspeed.initialize": "deepspeed"}
# The keyword that hands such a constructor the model its engine wraps: calling the engine runs
# that model's forward (``engine(x)`` is ``model(x)``).
WRAPPED_MODEL_KEYWORDS = {"deepspeed.initialize": "model"}
# Methods of a framework object that hand back what they are given, position for position, wrapped
# (``model, optimizer = accelerator.prepare(model, optimizer)``, ``fabric.setup``).
HANDING_BACK_METHODS = {"prepare", "setup", "setup_optimizers", "prepare_optimizer"}
# torch classes that wrap a module given as their first argument: calling one runs the wrapped
# module's forward and returns what it returns (``model = nn.DataParallel(model)``).
MODULE_WRAPPERS = {
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.data_parallel.DataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
}
# Framework objects that wrap the model: calling one is a forward (``engine(batch)``).
CALLED_AS_FORWARD = {"deepspeed"}

# The frameworks' packages, as scripts import them: seconds to import, so the warm runner imports
# the ones a script imports once, before it forks the runs.
FRAMEWORK_PACKAGES = ("accelerate", "pytorch_lightning", "lightning_fabric", "transformers")

# Trainers --------------------------------------------------------------------------------------------

# Trainer base classes that backward what one of their subclass's methods returns.
TRAINER_HOOKS = {
    "pytorch_lightning.LightningModule": "training_step",
    "pytorch_lightning.core.LightningModule": "training_step",
    "pytorch_lightning.core.module.LightningModule": "training_step",
    "lightning.LightningModule": "training_step",
    "lightning.pytorch.LightningModule": "training_step",
    "lightning.pytorch.core.LightningModule": "training_step",
    "lightning.pytorch.core.module.LightningModule": "training_step",
    "transformers.Trainer": "compute_loss",
    "transformers.Seq2SeqTrainer": "compute_loss",
    "transformers.trainer.Trainer": "compute_loss",
}
LIGHTNING_HOOK = "training_step"
# What a trainer hook's return hands the trainer to backward, when it returns a dict (Lightning's
# ``return {"loss": loss, "log": ...}``); a tuple hands its first item.
HOOK_RETURNED_LOSS_KEY = "loss"
# Trainers and the method that runs a module's hooks, given the module (``trainer.fit(model)``).
TRAINER_RUNS = {"pytorch_lightning.Trainer": "fit", "lightning.pytorch.Trainer": "fit", "lightning.Trainer": "fit"}
# LightningModule hooks the trainer runs with gradients off (torch.no_grad or inference mode).
LIGHTNING_NO_GRAD_HOOKS = {"validation_step", "test_step", "predict_step"}
# Framework objects a trainer base class keeps on ``self`` for its subclasses' hooks.
TRAINER_ATTRIBUTES = {
    "transformers.Trainer": {"self.accelerator": "accelerator"},
    "transformers.Seq2SeqTrainer": {"self.accelerator": "accelerator"},
    "transformers.trainer.Trainer": {"self.accelerator": "accelerator"},
}
# A LightningModule that sets this attribute to False optimizes by hand (``manual_backward``).
LIGHTNING_AUTOMATIC_OPTIMIZATION = "automatic_optimization"
# A LightningModule's hook whose returned optimizers the trainer steps, and its method that gives
# them back to the module (``opt = self.optimizers()``).
LIGHTNING_OPTIMIZERS_HOOK = "configure_optimizers"
LIGHTNING_OPTIMIZERS_METHOD = "optimizers"

# Optimizers and gradients ----------------------------------------------------------------------------


class GradientEffect(enum.Flag):
    """What code does to gradients and parameters (``FileAnalysis.gradient_effects`` answers it
    for a statement): a set of these, empty when it does none."""

    BACKWARD = enum.auto()  # backwards a graph, in any shape of the backward rows
    STEP = enum.auto()  # an optimizer updates parameters
    ZERO_GRAD = enum.auto()
    SCALER_UPDATE = enum.auto()  # ``scaler.update()`` after ``scaler.step(optimizer)``
    UNSCALE = enum.auto()  # ``scaler.unscale_(optimizer)``
    CLIP = enum.auto()  # clips gradients
    READ_GRAD = enum.auto()  # reads ``.grad``
    WRITE_GRAD = enum.auto()  # writes ``.grad`` by hand: ``p.grad = None``, ``p.grad.zero_()``, ``del p.grad``
    UPDATING = STEP | ZERO_GRAD | SCALER_UPDATE | WRITE_GRAD
    READING = UNSCALE | CLIP | READ_GRAD


OPTIMIZER_BASES = {"torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"}
# Methods of ``torch.nn.Module`` that read parameters or gradients, or set modes, and change no
# parameter's value (``model.zero_grad()``, ``[p.grad for p in model.parameters()]``).
PARAMETER_KEEPING_METHODS = {
    "parameters",
    "named_parameters",
    "buffers",
    "named_buffers",
    "modules",
    "named_modules",
    "children",
    "named_children",
    "state_dict",
    "zero_grad",
    "train",
    "eval",
}
# Methods of optimizers (and their wrappers) that no tensor has.
OPTIMIZER_ONLY_METHODS = {"zero_grad", "step", "add_param_group"}
# What calling each method does, whatever object it is called on (a ``torch.optim`` optimizer, the
# one ``accelerator.prepare`` returns, a LightningModule's ``self.optimizers()``, a DeepSpeed
# engine, a ``GradScaler``). Any other method of a known optimizer steps it (``first_step()``).
GRADIENT_METHODS = {
    "step": GradientEffect.STEP,
    "zero_grad": GradientEffect.ZERO_GRAD,
    "update": GradientEffect.SCALER_UPDATE,  # (without arguments: ``metrics.update(d)`` is a dict's)
    "unscale_": GradientEffect.UNSCALE,
    "clip_grad_norm_": GradientEffect.CLIP,
    "clip_grad_value_": GradientEffect.CLIP,
    "clip_gradients": GradientEffect.CLIP,  # a LightningModule's
}
# Functions that clip the gradients of the parameters they are given (``torch.nn.utils``).
CLIPPING_FUNCTIONS = {"clip_grad_norm_", "clip_grad_value_"}

# What sees the gradient of each backward on its own: a hook registered on a tensor, a parameter, a
# module or a graph node, or a custom autograd Function (whose backward need not be linear). Two
# backwards merged into one give such code the sum, where it saw each gradient apart; every other
# step of a backward is linear in the gradient it carries.
GRADIENT_HOOK_METHODS = {
    "register_hook",
    "register_prehook",
    "register_backward_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_post_accumulate_grad_hook",
    "register_multi_grad_hook",
    "register_module_backward_hook",
    "register_module_full_backward_hook",
    "register_module_full_backward_pre_hook",
}
AUTOGRAD_FUNCTION_BASES = {"torch.autograd.Function", "torch.autograd.function.Function"}
GRADIENT_HOOKING_LIBRARIES = ("opacus",)  # per-sample gradient clipping hooks every module it wraps

# Contexts ----------------------------------------------------------------------------------------------

NO_GRAD_CONTEXTS = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"}
GRAD_ENABLING_CONTEXTS = {"torch.enable_grad", "torch.autograd.enable_grad"}  # gradients on again inside no_grad
GRAD_MODE_SWITCH = "torch.set_grad_enabled"  # turns gradients off when its argument is False
SCALED_LOSS_CONTEXTS = {"apex.amp.scale_loss", "amp.scale_loss"}  # `with amp.scale_loss(loss, opt) as scaled:`
# Contexts whose exit lets every exception of the body through (a ``contextlib.suppress`` would not),
# and that clear or write no gradient (a call of one reaches no parameter's gradient):
# on every path that goes on past ``with`` one of them, its body ran to its end. Torch's by qualified
# name, a framework object's by its kind and method; tests/test_contexts.py runs each row.
EXCEPTION_KEEPING_CONTEXTS = {
    "contextlib.nullcontext",
    "torch.cuda.amp.autocast",
    "torch.no_grad",
    "torch.enable_grad",
    "torch.inference_mode",
    "torch.set_grad_enabled",
    "torch.autograd.no_grad",
    "torch.autocast",
    "torch.amp.autocast",
    "torch.cpu.amp.autocast",
}
# Contexts whose exit may swallow an exception of the body: past one, the body may not have run to
# its end. (Where gradfix does not know a context, it may; whether one is, is a guess.)
EXCEPTION_SWALLOWING_CONTEXTS = {"contextlib.suppress"}
EXCEPTION_KEEPING_FRAMEWORK_CONTEXTS = {
    ("accelerator", "autocast"),
    ("accelerator", "accumulate"),
    ("accelerator", "no_sync"),
    ("fabric", "autocast"),
    ("fabric", "no_backward_sync"),
}

# Loggers -----------------------------------------------------------------------------------------------

# Classes whose objects only read the tensors their methods are given (a logger writes numbers): a
# graph handed to one does not escape to code that could backward it later.
READING_LOGGERS = {
    "torch.utils.tensorboard.SummaryWriter",
    "torch.utils.tensorboard.writer.SummaryWriter",
    "tensorboardX.SummaryWriter",
}
