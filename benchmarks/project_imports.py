"""How long `gradfix check train.py` takes when train.py imports many modules of its project, which
gradfix reads from disk (codemods/project.py) though the command names only train.py.

A project of MODULES helper modules is generated, each a few hundred lines (every third defines a
step function that backwards the loss it is handed, as a helper module does; the others define
layers and data code); train.py imports each and calls the step functions. The command runs as a
user runs it, a new process each time: cold (an empty cache: every module's summaries computed)
and warm (the cache holds the report and the summaries; nothing changed). Then one helper changes:
its summaries are computed again and train.py is checked again, the other modules are served.
Target: warm ≤ 0.3 s for 20 modules.
Usage: python benchmarks/project_imports.py [--modules N] [--repeat N]
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP = """

def step_{i}(model, batch, optimizer):
    optimizer.zero_grad()
    loss = model(batch).pow(2).mean()
    loss.backward()
    optimizer.step()
    return loss
"""
LAYER = """

class Block{i}_{j}(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        y = self.norm(self.linear(x))
        return torch.relu(y) + x
"""


def helper_module(i: int, blocks: int) -> str:
    text = '"""Helper module {i}."""\nimport torch\n'.format(i=i) + "".join(LAYER.format(i=i, j=j) for j in range(blocks))
    return text + (STEP.format(i=i) if i % 3 == 0 else "")


def train_script(modules: int) -> str:
    imports = "".join(f"from helpers import module_{i}\n" for i in range(modules))
    calls = (
        "".join(f"        module_{i}.step_{i}(model, batch, optimizer)\n" for i in range(0, modules, 3)) or "        model(batch).sum().backward()\n"
    )
    return (
        "import torch\n\n" + imports + "\nmodel = torch.nn.Linear(8, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(3):\n    for batch in torch.randn(4, 2, 8):\n" + calls
    )


def run(folder: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one `gradfix check train.py` (CPU: what a busy machine does not inflate)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gradfix", "check", "--exit-zero", "train.py"], cwd=folder, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"gradfix failed: {done.stderr}")
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def median(runs: list[tuple[float, float]]) -> str:
    return f"{statistics.median(wall for wall, _ in runs):.3f} s wall, {statistics.median(cpu for _, cpu in runs):.3f} s CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        (folder / ".git").mkdir()  # a project of its own
        os.environ["XDG_CACHE_HOME"] = str(folder / "user-cache")  # the cache's secret, not the user's
        (folder / "helpers").mkdir()
        (folder / "helpers" / "__init__.py").write_text("")
        lines = 0
        for i in range(options.modules):
            text = helper_module(i, blocks=25)
            lines += text.count("\n")
            (folder / "helpers" / f"module_{i}.py").write_text(text)
        (folder / "train.py").write_text(train_script(options.modules))
        cold = run(folder)
        warm = [run(folder) for _ in range(options.repeat)]
        changed = []
        for n in range(options.repeat):
            path = folder / "helpers" / "module_0.py"
            path.write_text(path.read_text() + f"\n# edit {n}\n")
            changed.append(run(folder))
        alone = folder / "alone"  # the same command on a file that imports nothing: start-up and the rest
        (alone / ".git").mkdir(parents=True)
        (alone / "train.py").write_text(train_script(0))
        run(alone)
        baseline = [run(alone) for _ in range(options.repeat)]
    print(f"train.py importing {options.modules} project modules ({lines:,} lines), `gradfix check train.py`, a new process each run:")
    print(f"  cold (empty cache)            {median([cold])}")
    print(f"  warm (median of {options.repeat})            {median(warm)}   (target: wall <= 0.3 s)")
    print(f"  one module changed (median)   {median(changed)}")
    print(f"  warm, a file importing none   {median(baseline)}   (gradfix's start-up and one file: the part of issue 41)")


if __name__ == "__main__":
    main()
