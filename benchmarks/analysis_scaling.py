"""How the cost of checking one file grows with its size and with the depth of its loops.

Two curves, each from generated training code checked in this process (`check_source`, all rules):
files of about 1k to 50k lines made of training functions (forward, loss, backward, step, logging),
checked and fixed (`--unsafe-fixes`); and a file of fixed size whose training loop is nested 1 to 6
deep. Linear growth shows as a flat "ms per line" column and a flat ratio to the first row.
Usage: python benchmarks/analysis_scaling.py [--max-lines N]
"""

import argparse
import time

from gradfix.codemods.engine import FixMode, check_source
from gradfix.codemods.registry import all_rules

HEADER = "import torch\nimport torch.nn as nn\n"
# One training function; every tenth copy keeps each loss in a list for logging (GF007), so the
# fixing column has rewrites to make.
TRAINING_FUNCTION = '''
def train_{index}(model, loader, optimizer):
    total = 0.0
    history = []
    for x, y in loader:
        out = model(x)
        loss = ((out - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
        {logging}
    return total, history
'''
SIZES = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000)


def training_file(lines: int) -> bytes:
    per_function = TRAINING_FUNCTION.count("\n")
    functions = (
        TRAINING_FUNCTION.format(index=i, logging="history.append(loss)" if i % 10 == 0 else "history.append(total)")
        for i in range(max(1, lines // per_function))
    )
    return (HEADER + "".join(functions)).encode()


def nested_loops_file(depth: int, statements: int = 20) -> bytes:
    lines = [HEADER, "model = nn.Linear(4, 4)", "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)", "h = torch.zeros(4)"]
    indent = ""
    for level in range(depth):
        lines += [f"{indent}for i{level} in range(3):", f"{indent}    a{level} = model(h)"]
        indent += "    "
    lines += [f"{indent}x{k} = model(torch.randn(4)) * a{depth - 1}" for k in range(statements)]
    lines += [f"{indent}loss = x0.sum()", f"{indent}loss.backward()", f"{indent}optimizer.step()", f"{indent}h = h.detach()"]
    return ("\n".join(lines) + "\n").encode()


def seconds(source: bytes, mode: FixMode) -> float:
    start = time.perf_counter()
    check_source(source, all_rules(), mode, "generated.py")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-lines", type=int, default=SIZES[-1])
    options = parser.parse_args()
    print(f"{'lines':>7} {'check s':>8} {'ms/line':>8} {'ratio':>6} {'fix s':>7} {'ms/line':>8} {'ratio':>6}")
    first = None
    for size in (size for size in SIZES if size <= options.max_lines):
        source = training_file(size)
        lines = source.count(b"\n")
        check, fix = seconds(source, FixMode.NONE) / lines, seconds(source, FixMode.UNSAFE) / lines
        first = first or (check, fix)
        print(f"{lines:7d} {check * lines:8.2f} {1000 * check:8.3f} {check / first[0]:6.2f} "
              f"{fix * lines:7.2f} {1000 * fix:8.3f} {fix / first[1]:6.2f}")
    print(f"\n{'depth':>5} {'lines':>6} {'check s':>8} {'ratio':>6}")
    base = None
    for depth in range(1, 7):
        source = nested_loops_file(depth)
        cost = seconds(source, FixMode.NONE)
        base = base or cost
        lines = source.count(b"\n")
        print(f"{depth:5d} {lines:6d} {cost:8.3f} {cost / base:6.2f}")


if __name__ == "__main__":
    main()
