"""torch's own API as gradfix reads it, as plain tables: which functions and tensor methods make a
tensor with no history, which hand a tensor's values or facts out of autograd, which return indices
beside their values, which save tensors for their backward, which torch.nn modules hold no
parameters.

Beside ``frameworks`` (the libraries built on torch, and how each backwards a graph or steps an
optimizer): the analysis reads these tables and never spells torch's names itself; a torch function
gradfix should know is a row here. Plain data: this module never loads LibCST.
"""

from __future__ import annotations

# Making tensors --------------------------------------------------------------------------------------

# torch functions that draw random values: a new tensor, with no history.
DRAWING_FUNCTIONS = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"})
# What draws other values each time it runs: torch's random functions (by their last name), a
# tensor's (or a distribution's) methods that draw random values, and the random modules of Python
# and numpy.
RANDOM_FUNCTIONS = frozenset({*DRAWING_FUNCTIONS, "normal", "bernoulli", "multinomial", "poisson"})
RANDOM_METHODS = frozenset(
    {
        *("uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_"),
        *("bernoulli", "multinomial", "sample", "rsample"),  # (and a torch.distributions object's draws)
    }
)
RANDOM_MODULES = ("random.", "numpy.random.")
# The class of parameters: a new leaf, holding none of the history of the tensor it is given.
PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
# torch functions (by their last name) that make a new tensor with no history.
CREATION_FUNCTIONS = frozenset(
    {
        # (not ``as_tensor`` nor ``asarray``: given a tensor, they return it, or a cast that keeps its graph)
        *("zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "tensor", "from_numpy"),
        *("zeros_like", "ones_like", "empty_like", "full_like", "manual_seed"),
        "Variable",  # torch.autograd.Variable(t): a new leaf sharing t's data, without its history
        *DRAWING_FUNCTIONS,
    }
)
# torch.nn.init's functions (by their last name): each fills the tensor it is given in place with
# gradients off and returns that same tensor, its history as it was (``w = init.xavier_uniform_(w)``
# stores back the leaf it was given). The names without ``_`` are the deprecated spellings.
INITIALIZING_FUNCTIONS = frozenset(
    {
        *("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_", "orthogonal_", "sparse_"),
        *("xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"),
        *("uniform", "normal", "constant", "eye", "dirac", "orthogonal", "sparse"),
        *("xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal"),
    }
)
# Tensor methods that make a new tensor of the receiver's dtype and device, with no history.
FACTORY_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# Tensor methods and torch functions whose result has no autograd history: comparisons, indices,
# tests and integer casts (``torch.eq(pred, y).sum()`` counts correct answers).
NON_DIFFERENTIABLE = frozenset(
    {
        *("eq", "ne", "lt", "le", "gt", "ge", "isclose", "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_not"),
        *("argmax", "argmin", "argsort", "nonzero", "count_nonzero", "bucketize", "searchsorted", "multinomial"),
        *("long", "int", "bool", "short", "byte", "char"),
    }
)

# Casts, and the integer and boolean types a cast to which ends the graph as ``x.long()`` does (an
# integer tensor cannot require grad): ``x.to(torch.long)``, ``x.type(torch.LongTensor)``.
CASTING_METHODS = frozenset({"to", "type"})
# Tensor methods whose result, on a floating tensor with a graph, is a node of that graph: casts to
# another floating type, a copy, reductions and views (``loss.float()``, ``loss.mean()``).
GRAPH_KEEPING_METHODS = frozenset(
    {"float", "double", "half", "bfloat16", "clone", "mean", "sum", "contiguous", "squeeze", "unsqueeze", "view", "reshape", "flatten"}
)
INTEGER_TYPES = frozenset(
    {
        *(f"torch.{dtype}" for dtype in ("long", "int", "short", "bool", "uint8", "int8", "int16", "int32", "int64")),
        *(f"torch.{kind}Tensor" for kind in ("Long", "Int", "Short", "Byte", "Char", "Bool")),
        *(f"torch.cuda.{kind}Tensor" for kind in ("Long", "Int", "Short", "Byte", "Char", "Bool")),
    }
)

# What a tensor tells without its graph ------------------------------------------------------------

# What a tensor tells of itself without its values: attributes, and methods asked of it.
METADATA_ATTRIBUTES = frozenset({"shape", "dtype", "device", "ndim"})
METADATA_METHODS = frozenset({"size", "dim", "numel"})
# Its data and its gradient: tensors outside its graph.
GRAPHLESS_ATTRIBUTES = frozenset({"data", "grad"})
# autograd's record of a tensor, which a detach changes.
AUTOGRAD_RECORD = frozenset({"is_leaf", "requires_grad", "grad_fn"})
# autograd's internal counters and links of a tensor.
AUTOGRAD_INTERNALS = frozenset({"_version", "_base", "output_nr"})
# Tensor methods that hand its values out of autograd: a number, a list, a numpy array.
VALUE_METHODS = frozenset({"item", "tolist", "numpy"})
# Tensor methods whose result carries none of the receiver's graph.
DETACHING_METHODS = frozenset({"detach", *VALUE_METHODS, *METADATA_METHODS, "nelement", "data_ptr", "ndimension"})
# In-place tensor methods that add their first argument into the receiver: it then holds the
# argument's graph beside its own (``total.add_(loss)`` is ``total += loss``).
ACCUMULATING_METHODS = frozenset({"add_", "sub_"})
# In-place tensor methods end in "_"; these two only flip autograd bookkeeping.
BOOKKEEPING_METHODS = frozenset({"detach_", "requires_grad_"})
# A torch distribution's samples carry no graph (``rsample`` is the differentiable one).
SAMPLING_METHODS = frozenset({"sample", "sample_n", "enumerate_support"})

# What a call returns ------------------------------------------------------------------------------

# Reductions that return their values and the values' indices (``values, indices = x.topk(k)``;
# ``max``, ``min`` and ``median`` only when given a dimension): the indices carry no graph.
WITH_INDICES = frozenset({"topk", "sort", "kthvalue", "mode", "cummax", "cummin"})
WITH_INDICES_GIVEN_A_DIMENSION = frozenset({"max", "min", "median"})
# torch functions that return a (named) tuple of tensors, whatever their arguments, by length.
TUPLE_FUNCTIONS = {
    **{f"torch.{name}": 2 for name in sorted(WITH_INDICES)},
    "torch.linalg.eigh": 2,
    "torch.linalg.eig": 2,
    "torch.linalg.qr": 2,
    "torch.linalg.slogdet": 2,
    "torch.linalg.svd": 3,
    "torch.linalg.inv_ex": 2,
    "torch.linalg.cholesky_ex": 2,
    "torch.aminmax": 2,
    "torch.std_mean": 2,
    "torch.var_mean": 2,
    "torch.frexp": 2,
}
# Those whose every output holds the graph of what they are given (run: each has a grad_fn); the
# others' last output is an integer (frexp's exponent, inv_ex's and cholesky_ex's info).
EVERY_OUTPUT_DIFFERENTIABLE = frozenset(
    {
        "torch.linalg.eigh",
        "torch.linalg.eig",
        "torch.linalg.qr",
        "torch.linalg.svd",
        "torch.linalg.slogdet",
        "torch.aminmax",
        "torch.std_mean",
        "torch.var_mean",
    }
)

# What a backward frees: the must-answer and the may-answer side by side ---------------------------

# Operations whose backward certainly needs a tensor saved in the forward (their input or output),
# so that a backward through them frees it and a second one raises. A layer of torch.nn with
# parameters saves its input too. (Not ``einsum``: given one operand it is a sum, a transpose or a
# diagonal, and saves nothing.)
SAVING_FOR_CERTAIN = frozenset(
    {"matmul", "mm", "bmm", "mv", "mul", "div", "pow", "square", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "elu", "silu",
     "softmax", "log_softmax", "sin", "cos", "linear", "conv1d", "conv2d", "conv3d", "mse_loss", "l1_loss", "cross_entropy", "nll_loss",
     "binary_cross_entropy", "binary_cross_entropy_with_logits", "smooth_l1_loss", "kl_div", "layer_norm", "batch_norm", "norm"}
)  # fmt: skip
# torch.nn modules without parameters whose backward certainly needs a tensor saved in the
# forward, as the functions they call (a layer with parameters saves its input; dropout saves a
# mask only in training mode).
SAVING_FOR_CERTAIN_MODULES = frozenset(
    {"MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss", "KLDivLoss",
     "ReLU", "LeakyReLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "GELU", "SiLU", "ELU"}
)  # fmt: skip
# Operations whose backward needs no tensor saved in the forward (sums, means, additions, and
# what only moves, copies, casts or joins values): a backward frees nothing of a graph built of
# these from leaves, and a second backward through it runs. Any other operation may save tensors.
SAVING_NOTHING_METHODS = frozenset(
    {"sum", "mean", "neg", "view", "view_as", "reshape", "reshape_as", "flatten", "squeeze", "unsqueeze", "expand", "expand_as", "t",
     "transpose", "permute", "contiguous", "clone", "repeat", "flip", "narrow", "roll", *CASTING_METHODS, "float", "double", "half",
     "bfloat16", "cpu", "cuda"}
)  # fmt: skip
# Tensor methods whose result is a view of the tensor (its storage, seen through other strides): a
# view of a parameter sees every update the optimizer makes in place.
VIEW_METHODS = frozenset(
    {"t", "view", "view_as", "unsqueeze", "squeeze", "transpose", "permute", "expand", "expand_as", "narrow", "select", "unflatten",
     "diagonal", "swapaxes", "movedim"}
)  # fmt: skip
SAVING_NOTHING_FUNCTIONS = frozenset(
    f"torch.{name}"
    for name in ("sum", "mean", "add", "sub", "neg", "cat", "stack", "flatten", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "clone")
)

# torch's namespaces of functions: a name bound to one of their functions (``cost = F.mse_loss``, in
# lower case: not a class such as ``torch.Tensor``) holds that function, and a call of the name is
# read as the function's. Not its submodules, nor the contexts that switch gradients (read by the
# name a ``with`` spells).
FUNCTION_NAMESPACES = frozenset({"torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special"})
TORCH_SUBMODULES = frozenset(
    {"torch.nn", "torch.optim", "torch.autograd", "torch.utils", "torch.cuda", "torch.distributions", "torch.amp", "torch.cpu", "torch.backends",
     "torch.distributed", "torch.jit", "torch.func", "torch.onnx", "torch.fx", "torch.testing", "torch.hub", *FUNCTION_NAMESPACES}
)  # fmt: skip

# torch.nn modules ---------------------------------------------------------------------------------

# nn modules whose call adds no parameters: their output carries graph only if their input does.
# Named one by one, not by a "Loss" suffix: AdaptiveLogSoftmaxWithLoss and LinearCrossEntropyLoss
# hold a layer, and TripletMarginWithDistanceLoss calls whatever distance function it is given.
PARAMETERLESS_MODULES = frozenset(
    {
        # losses
        *("BCELoss", "BCEWithLogitsLoss", "CTCLoss", "CosineEmbeddingLoss", "CrossEntropyLoss", "GaussianNLLLoss"),
        *("HingeEmbeddingLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss", "MarginRankingLoss", "MultiLabelMarginLoss"),
        *("MultiLabelSoftMarginLoss", "MultiMarginLoss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "SmoothL1Loss"),
        *("SoftMarginLoss", "TripletMarginLoss"),
        # activations
        *("ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid", "Hardtanh"),
        *("Hardsigmoid", "Hardswish", "Softplus", "Softsign", "Softmax", "LogSoftmax", "Softmin", "Threshold"),
        # dropout, shapes, pooling, padding, distances
        *("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "Flatten", "Unflatten"),
        *("MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d"),
        *("AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"),
        *("Upsample", "PixelShuffle", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad2d"),
        *("CosineSimilarity", "PairwiseDistance"),
    }
)
# ``model.forward(x)`` runs the module's forward as ``model(x)`` does (without its hooks).
FORWARD_METHOD = "forward"
# A module's (and a LightningModule's) attributes that hold no parameter: reading one runs nothing.
MODULE_ATTRIBUTES_WITHOUT_PARAMETERS = frozenset(
    {"device", "dtype", "training", "hparams", "current_epoch", "global_step", "trainer", "automatic_optimization"}
)
# Methods that mark a receiver as an nn.Module wherever they are called on it.
MODULE_METHODS = frozenset({"parameters", "named_parameters", "train", "eval", "state_dict", "modules", "children"})
# Methods that return the module they are called on.
MODULE_RETURNING = frozenset({"to", "cuda", "cpu", "double", "float", "half", "train", "eval", "requires_grad_"})
# Methods that list a module's parameters.
PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
# torch.nn.Module's methods that bind an attribute of the module, named by their first argument, to
# their second (``self.register_buffer("w_avg", torch.zeros(4))`` binds ``self.w_avg``).
REGISTERING_METHODS = frozenset({"register_buffer", "register_parameter"})
# torch.nn.Module's own methods that run no forward: what they return (the module, its parameters,
# buffers, children, state, a hook's handle, None) is no graph built by the call.
MODULE_API = frozenset(
    {
        *MODULE_METHODS,
        *MODULE_RETURNING,
        *("named_modules", "named_children", "buffers", "named_buffers", "get_submodule", "get_parameter", "get_buffer"),
        *("zero_grad", "apply", "load_state_dict", "register_buffer", "register_parameter", "register_module", "add_module"),
        *("register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook", "register_backward_hook"),
        *("share_memory", "bfloat16", "to_empty", "type", "extra_repr", "ipu", "xpu"),
    }
)

# Builtins that never see a tensor's gradient (they read values, counts and types).
BUILTINS_WITHOUT_GRADIENTS = frozenset(
    {"print", "len", "float", "int", "bool", "str", "format", "repr", "isinstance", "range", "sum", "max", "min", "abs", "round", "list",
     "tuple", "dict", "set", "zip", "enumerate", "sorted", "reversed", "any", "all"}
)  # fmt: skip


def is_optimizer_class(qualified: str) -> bool:
    """``torch.optim.SGD`` and friends (not ``torch.optim.lr_scheduler.*``)."""
    parts = qualified.split(".")
    return len(parts) == 3 and parts[:2] == ["torch", "optim"] and parts[2][:1].isupper()
