"""Small, valid PyTorch training programs composed from realistic parts, as a Hypothesis strategy.

A program picks a model (a linear layer, a small MLP, a shared trunk with two heads, a recurrent
cell carrying a hidden state), its losses, a loop (over a range, over batches, epochs of batches),
how it backwards (one loss, two losses, with or without ``retain_graph=True``), where it steps and
zeroes gradients, what it detaches, what it logs and whether it evaluates under ``torch.no_grad()``.
Some parts are the bugs gradfix knows (a forward before the loop, a hidden state carried without a
detach, a teacher's output cached with its graph, a loss kept for logging, two backwards of one
graph); the others are the correct spellings of the same thing, so that a rule must tell them apart.

Every program is seeded and tiny: it runs in milliseconds, makes at most a few dozen backward
calls, and either runs or fails only with "Trying to backward through the graph a second time"
or, where a graph is kept (``retain_graph=True``, its own or forced), because an optimizer changed
a weight that the kept graph saved.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

FEATURES, HIDDEN, BATCH = 4, 6, 2
MAX_BACKWARD_CALLS = 2 * 2 * 4 + 1  # two losses, two epochs of at most four batches, one after the loop


@dataclass(frozen=True)
class Model:
    setup: tuple[str, ...]
    parameters: str  # the trained parameters, as an optimizer takes them
    forward: tuple[str, ...]  # reads x, defines prediction
    evaluation: str  # a prediction for inputs[0] that builds no graph state of its own
    recurrent: bool = False


MODELS = {
    "linear": Model(
        (f"model = nn.Linear({FEATURES}, 1)",),
        "model.parameters()",
        ("prediction = model(x)",),
        "model(inputs[0])",
    ),
    "mlp": Model(
        (f"model = nn.Sequential(nn.Linear({FEATURES}, {HIDDEN}), nn.Tanh(), nn.Linear({HIDDEN}, 1))",),
        "model.parameters()",
        ("prediction = model(x)",),
        "model(inputs[0])",
    ),
    "two_heads": Model(
        (
            f"trunk = nn.Sequential(nn.Linear({FEATURES}, {HIDDEN}), nn.ReLU())",
            f"head = nn.Linear({HIDDEN}, 1)",
            f"aux_head = nn.Linear({HIDDEN}, 1)",
        ),
        "[*trunk.parameters(), *head.parameters(), *aux_head.parameters()]",
        ("features = trunk(x)", "prediction = head(features)"),
        "head(trunk(inputs[0]))",
    ),
    "rnn_cell": Model(
        (f"cell = nn.RNNCell({FEATURES}, {HIDDEN})", f"head = nn.Linear({HIDDEN}, 1)"),
        "[*cell.parameters(), *head.parameters()]",
        ("hidden = cell(x, hidden)", "prediction = head(hidden)"),
        f"head(cell(inputs[0], torch.zeros({BATCH}, {HIDDEN})))",
        recurrent=True,
    ),
    "gru_cell": Model(
        (f"cell = nn.GRUCell({FEATURES}, {HIDDEN})", f"head = nn.Linear({HIDDEN}, 1)"),
        "[*cell.parameters(), *head.parameters()]",
        ("hidden = cell(x, hidden)", "prediction = head(hidden)"),
        f"head(cell(inputs[0], torch.zeros({BATCH}, {HIDDEN})))",
        recurrent=True,
    ),
}

LOSSES = {
    "mse": "nn.functional.mse_loss(prediction, y)",
    "l1": "nn.functional.l1_loss(prediction, y)",
    "squared_error": "(prediction - y).pow(2).mean()",
    "criterion": "criterion(prediction, y)",
}
# The second loss of a program with two: the auxiliary head's, or a penalty on the prediction.
# Either shares the forward's graph with the first loss.
SECOND_LOSSES = {
    "aux_head": "nn.functional.mse_loss(aux_head(features), y)",
    "penalty": "prediction.pow(2).mean() * 0.1",
}
ONE_LOSS_BACKWARDS = {
    "backward": ("loss.backward()",),
    "retained": ("loss.backward(retain_graph=True)",),
    "twice": ("loss.backward()", "loss.backward()"),
    "autograd": ("torch.autograd.backward(loss)",),
}
TWO_LOSS_BACKWARDS = {
    "sum": ("(loss + aux_loss).backward()",),
    "total": ("combined = loss + aux_loss", "combined.backward()"),
    "separate": ("loss.backward()", "aux_loss.backward()"),
    "first_retained": ("loss.backward(retain_graph=True)", "aux_loss.backward()"),
    "autograd_both": ("torch.autograd.backward([loss, aux_loss])",),
}
# How a recurrent program treats its hidden state between iterations.
HIDDEN_HANDLING = ("carried", "detached_at_top", "detached_in_call", "reset_each_batch")
LOGGING = ("none", "append", "append_detached", "total", "total_item", "running_sum", "print_item")
TEACHERS = ("none", "cached", "cached_detached", "under_no_grad")


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def add(self, *lines: str) -> None:
        self.lines += ["    " * self.depth + line for line in lines]

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@st.composite
def training_programs(draw: st.DrawFn) -> str:
    seed = draw(st.integers(0, 3))
    batches = draw(st.integers(2, 4))
    model_name = draw(st.sampled_from(sorted(MODELS)))
    model = MODELS[model_name]
    loss_name = draw(st.sampled_from(sorted(LOSSES)))
    second_loss = draw(st.sampled_from(["none", *sorted(SECOND_LOSSES)]))
    if second_loss == "aux_head" and model_name != "two_heads":
        second_loss = "penalty"
    two_losses = second_loss != "none"
    backwards = TWO_LOSS_BACKWARDS if two_losses else ONE_LOSS_BACKWARDS
    backward_name = draw(st.sampled_from(sorted(backwards)))
    loop = draw(st.sampled_from(["range", "batches", "epochs"]))
    optimizer = draw(st.sampled_from(["sgd", "adam", "by_hand"]))
    parameters_in_a_variable = draw(st.booleans())
    zero_grad = draw(st.sampled_from(["top", "before_backward", "after_step", "never"]))
    step = draw(st.sampled_from(["every_batch", "every_second_batch", "after_loop"]))
    hidden = draw(st.sampled_from(HIDDEN_HANDLING)) if model.recurrent else "none"
    teacher = draw(st.sampled_from(TEACHERS))
    # Zipped with the inputs, a teacher's targets reach the loop through its targets, which the
    # analysis reads as data; indexed, they are seen.
    teacher_targets_zipped = teacher != "none" and draw(st.booleans())
    # A forward before a loop that steps in place rarely runs even with retain_graph=True: drawn less often.
    forward_before_loop = draw(st.sampled_from([False, False, False, True]))
    logging = draw(st.sampled_from(LOGGING))
    evaluation = draw(st.booleans())
    after_loop = draw(st.sampled_from(["nothing", "backward_last_loss", "backward_running_sum"]))
    if after_loop == "backward_running_sum" and logging != "running_sum":
        after_loop = "nothing"

    out = _Lines()
    # Double precision: merged and separate backwards add the same gradients in another order, and
    # in single precision that alone can differ by more than the 1e-6 the fixes are held to.
    out.add("import torch", "import torch.nn as nn", "", f"torch.manual_seed({seed})", "torch.set_default_dtype(torch.float64)")
    out.add(f"inputs = torch.randn({batches}, {BATCH}, {FEATURES})", f"targets = torch.randn({batches}, {BATCH}, 1)")
    out.add(*model.setup)
    if loss_name == "criterion":
        out.add("criterion = nn.SmoothL1Loss()")
    if teacher != "none":
        out.add(f"teacher = nn.Linear({FEATURES}, 1)")
        if teacher == "under_no_grad":
            out.add("with torch.no_grad():", "    soft_targets = teacher(inputs)")
        else:
            out.add("soft_targets = teacher(inputs)" + (".detach()" if teacher == "cached_detached" else ""))
    target_source = "soft_targets" if teacher != "none" else "targets"
    # An optimizer given a list kept in a variable hides which modules it trains (GF006 needs to
    # know); one given the parameters in its call does not.
    trained = model.parameters
    if optimizer == "by_hand" or parameters_in_a_variable:
        out.add(f"parameters = {trained if trained.startswith('[') else f'list({trained})'}")
        trained = "parameters"
    if optimizer == "sgd":
        out.add(f"optimizer = torch.optim.SGD({trained}, lr=0.05)")
    elif optimizer == "adam":
        out.add(f"optimizer = torch.optim.Adam({trained}, lr=0.01)")
    if model.recurrent:
        out.add(f"hidden = torch.zeros({BATCH}, {HIDDEN})")
    if logging in ("append", "append_detached"):
        out.add("losses = []")
    elif logging in ("total", "total_item", "running_sum"):
        out.add("total = 0.0")

    forward = list(model.forward)
    if hidden == "detached_in_call":
        forward[0] = "hidden = cell(x, hidden.detach())"
    losses = [f"loss = {LOSSES[loss_name]}"]
    if two_losses:
        losses.append(f"aux_loss = {SECOND_LOSSES[second_loss]}")

    def add_zero_grad() -> None:
        if optimizer == "by_hand":
            out.add("for parameter in parameters:", "    parameter.grad = None")
        else:
            out.add("optimizer.zero_grad()")

    def add_step() -> None:
        if optimizer == "by_hand":
            out.add(
                "with torch.no_grad():",
                "    for parameter in parameters:",
                "        if parameter.grad is not None:",
                "            parameter -= 0.05 * parameter.grad",
            )
        else:
            out.add("optimizer.step()")
        if zero_grad == "after_step":
            add_zero_grad()

    if forward_before_loop:
        out.add(f"x, y = inputs[0], {target_source}[0]")
        out.add(*forward, *losses)
    if loop == "epochs":
        out.add("for epoch in range(2):")
        out.depth += 1
        if hidden == "reset_each_batch":
            out.add(f"hidden = torch.zeros({BATCH}, {HIDDEN})")
    if loop == "range":
        out.add(f"for step in range({batches}):")
        out.depth += 1
        out.add(f"x, y = inputs[step], {target_source}[step]")
    elif teacher_targets_zipped:
        out.add(f"for step, (x, y) in enumerate(zip(inputs, {target_source})):")
        out.depth += 1
    else:
        out.add("for step, (x, y) in enumerate(zip(inputs, targets)):")
        out.depth += 1
        if teacher != "none":
            out.add("y = soft_targets[step]")
    if hidden == "reset_each_batch" and loop != "epochs":
        # The state starts afresh where the program's sequences start: here, every batch.
        out.add(f"hidden = torch.zeros({BATCH}, {HIDDEN})")
    if zero_grad == "top":
        add_zero_grad()
    if hidden == "detached_at_top":
        out.add("hidden = hidden.detach()")
    if not forward_before_loop:
        out.add(*forward, *losses)
    if zero_grad == "before_backward":
        add_zero_grad()
    out.add(*backwards[backward_name])
    if step == "every_batch":
        add_step()
    elif step == "every_second_batch":
        out.add("if step % 2 == 1:")
        out.depth += 1
        add_step()
        out.depth -= 1
    logged = "loss"
    if logging == "append":
        out.add(f"losses.append({logged})")
    elif logging == "append_detached":
        out.add(f"losses.append({logged}.detach())")
    elif logging == "total":
        out.add(f"total += {logged}")
    elif logging == "total_item":
        out.add(f"total += {logged}.item()")
    elif logging == "running_sum":
        out.add(f"total = total + {logged}")
    elif logging == "print_item":
        out.add(f'print(f"step {{step}}: {{{logged}.item():.4f}}")')
    if evaluation:
        out.add("with torch.no_grad():", f"    evaluation_loss = nn.functional.mse_loss({model.evaluation}, targets[0])")
        out.add('print(f"evaluation: {evaluation_loss.item():.4f}")')
    out.depth = 0
    if after_loop == "backward_last_loss":
        out.add("loss.backward()")
    elif after_loop == "backward_running_sum":
        out.add("total.backward()")
    if step == "after_loop" or after_loop != "nothing":
        add_step()
    if logging in ("append", "append_detached"):
        out.add('print(f"mean loss: {torch.stack(losses).mean().item():.4f}")')
    elif logging in ("total", "running_sum"):
        out.add('print(f"total loss: {float(total):.4f}")')
    elif logging == "total_item":
        out.add(f'print(f"mean loss: {{total / {batches}:.4f}}")')
    return out.text()
