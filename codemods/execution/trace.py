"""The side of ``gradfix fix --verify CMD`` that runs in the command's processes.

The runner runs this file as its script with CMD as its arguments: it starts CMD and exits with
its status, so that CMD, and everything it starts, runs under the runner's isolation (its
environment, limits, timeout and clean-up). gradfix puts a copy of this file, named
``sitecustomize.py``, first on the ``PYTHONPATH`` CMD gets: every Python process of CMD imports it
at start-up, and it records, without touching the user's files:

* the user's files the process compiles (gradfix removes ``__pycache__`` folders from the copy and
  sets ``PYTHONDONTWRITEBYTECODE``, so every module executed is compiled): which rewrites CMD ran;
* once the program imports torch, the mean of every tensor a backward is asked for (a loss, for
  the first ``GRADFIX_TRACE_STEPS`` backward calls), the mean and root mean square of every
  parameter after each of the first ``GRADFIX_TRACE_STEPS`` optimizer steps, and the exception a
  backward raised or the process died of;
* at exit, for a process that made backward calls but no optimizer step (a gradient check, a
  hand-written update), the leaves those first backward calls reached as it leaves them: how many
  have a gradient, and the sums over them of their gradients' and their own means and root mean
  squares (sums: a rewrite that merges two backward calls reaches the same leaves in another order);
* with ``GRADFIX_TRACE_RETAIN`` set, it forces ``retain_graph=True`` on every backward, as the
  runner does.

Each process appends JSON lines (``kind``, ``detail``, ``values``) to ``<GRADFIX_TRACE_DIR>/<pid>.jsonl``
as it goes, so a process killed at the timeout still leaves what it showed. It seeds Python's and
torch's random generators (a program that seeds its own overrides them), so two runs of one
program draw the same numbers. The command's Python may not have gradfix installed: this file
imports only the standard library, and torch once the program has imported it.
"""

import atexit
import importlib.abc
import importlib.util
import json
import os
import random
import subprocess
import sys
import weakref

STEPS_VARIABLE, FOLDER_VARIABLE, ROOT_VARIABLE, RETAIN_VARIABLE = (
    "GRADFIX_TRACE_STEPS",
    "GRADFIX_TRACE_DIR",
    "GRADFIX_TRACE_ROOT",
    "GRADFIX_TRACE_RETAIN",
)


class _Trace:
    """One process's trace file."""

    def __init__(self, folder: str, root: str, steps: int) -> None:
        self.root = os.path.join(os.path.realpath(root), "")
        self.steps = steps
        self.backward_calls = self.optimizer_steps = 0
        self.reached: dict = {}  # id -> a weak reference to each leaf the traced backward calls reached
        self.compiled: set = set()
        self.noted_error = None  # the last error a backward raised, noted already if the process dies of it
        self.file = open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a", encoding="utf-8")
        self.note("process", " ".join(sys.argv))

    def note(self, kind: str, detail: str = "", values: list = ()) -> None:
        """Append an event; the copy's path, which differs from run to run, is left out of it."""
        event = {"kind": kind, "detail": detail.replace(self.root, ""), "values": list(values)}
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()

    def audit(self, event: str, args: tuple) -> None:
        if event != "compile" or not isinstance(args[1], str) or not os.path.isabs(args[1]):  # not "<string>"
            return
        path = os.path.realpath(args[1])
        if not path.startswith(self.root):
            return
        if path not in self.compiled:
            self.compiled.add(path)
            self.note("file", path)  # (relative: note leaves the copy's path out)

    def note_reached_leaves(self) -> None:
        """At exit, without an optimizer step: the leaves the backward calls reached, as they are left."""
        if self.optimizer_steps or not self.backward_calls:
            return
        leaves = [leaf for leaf in (reference() for reference in self.reached.values()) if leaf is not None and leaf.grad is not None]
        sums = [len(leaves)]
        for tensors in ([leaf.grad.detach() for leaf in leaves], [leaf.detach() for leaf in leaves]):
            sums += [sum(_mean(t) for t in tensors), sum(_mean(t * t) ** 0.5 for t in tensors)]
        self.note("gradients", "", sums)


def _record(torch, trace: _Trace, retain: bool) -> None:
    """Wrap ``torch.autograd.backward`` (which ``Tensor.backward`` calls) and hook every
    optimizer's step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    original_backward = torch.autograd.backward

    def backward(tensors, *args, **kwargs):
        if retain:
            kwargs["retain_graph"] = True
            args = args[:1]  # retain_graph, when given positionally, is the third argument
        if not isinstance(tensors, torch.Tensor):
            tensors = tuple(tensors)  # a generator is read once: here, then by backward
        if trace.backward_calls < trace.steps:
            losses = (tensors,) if isinstance(tensors, torch.Tensor) else tensors
            trace.note("backward", str(trace.backward_calls + 1), [_mean(t.detach()) for t in losses])
            trace.reached.update((id(leaf), weakref.ref(leaf)) for leaf in _leaves(losses))
        trace.backward_calls += 1
        try:
            return original_backward(tensors, *args, **kwargs)
        except Exception as error:
            trace.note("error", f"{type(error).__name__}: {error}")
            trace.noted_error = error
            raise

    def stepped(optimizer, *_) -> None:
        trace.optimizer_steps += 1
        if trace.optimizer_steps <= trace.steps:
            parameters = [p.detach() for group in optimizer.param_groups for p in group["params"]]
            values = [value for p in parameters for value in (_mean(p), _mean(p * p) ** 0.5)]
            trace.note("step", str(trace.optimizer_steps), values)

    torch.autograd.backward = backward
    register_optimizer_step_post_hook(stepped)
    atexit.register(trace.note_reached_leaves)
    torch.manual_seed(0)


def _leaves(tensors) -> list:
    """The leaves the graphs of ``tensors`` end in: what a backward of them accumulates gradients into."""
    leaves = [t for t in tensors if t.grad_fn is None and t.requires_grad]
    pending, seen = [t.grad_fn for t in tensors if t.grad_fn is not None], set()
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # an AccumulateGrad: its leaf
            leaves.append(node.variable)
        pending += [following for following, _ in node.next_functions]
    return leaves


def _mean(tensor) -> float:
    return float(tensor.double().mean()) if tensor.numel() else 0.0


class _WhenTorchLoads(importlib.abc.MetaPathFinder):
    """Records once torch is imported: importing it here would cost every process of CMD seconds."""

    def __init__(self, trace: _Trace, retain: bool) -> None:
        self.trace, self.retain = trace, retain

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def load_and_record(module) -> None:
            load(module)
            _record(module, self.trace, self.retain)

        spec.loader.exec_module = load_and_record
        return spec


def _install() -> None:
    folder, root = os.environ.get(FOLDER_VARIABLE), os.environ.get(ROOT_VARIABLE)
    if not folder or not root:
        return
    trace = _Trace(folder, root, int(os.environ.get(STEPS_VARIABLE, "0")))
    sys.addaudithook(trace.audit)
    sys.meta_path.insert(0, _WhenTorchLoads(trace, bool(os.environ.get(RETAIN_VARIABLE))))
    random.seed(0)
    excepthook = sys.excepthook

    def died(kind, error, frames) -> None:
        if error is not trace.noted_error:
            trace.note("error", f"{kind.__name__}: {error}")
        excepthook(kind, error, frames)

    sys.excepthook = died


def _launch(command: list) -> int:
    """Run ``command`` (the user's CMD) and return its exit status."""
    try:
        return subprocess.run(command).returncode
    except OSError as error:
        print(f"gradfix: cannot run {command[0]}: {error.strerror or error}", file=sys.stderr)
        return 127


if __name__ == "sitecustomize":
    _install()
elif __name__ == "__main__":
    sys.exit(_launch(sys.argv[1:]))
