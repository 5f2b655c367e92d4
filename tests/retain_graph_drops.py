"""Whether dropping one ``retain_graph=True`` is right, asked both ways: does gradfix's safe fix drop
it (GF009), and does the program still run once it is dropped. The tests that read the analysis's
unknowns (a rebound function, a container another name holds) assert that the two agree."""

import subprocess
import sys

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode


def fixed_safely(source: str) -> bool:
    """Whether gradfix's safe fixes of ``source`` include GF009's."""
    return any(f.code == "GF009" for f in check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py").fixed)


def runs_with_it_dropped(source: str, retained_call: str) -> bool:
    """Whether ``source`` runs with ``retained_call`` (``"loss.backward(retain_graph=True)"``) made a plain backward."""
    dropped = source.replace(retained_call, retained_call.replace("retain_graph=True", ""))
    return subprocess.run([sys.executable, "-c", dropped], capture_output=True, timeout=300).returncode == 0
