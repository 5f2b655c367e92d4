"""The independent differential fuzz at scale: generated training programs
(tests/independent_programs.py), each run, fixed by gradfix (safe fixes, and unsafe ones where a
finding offers them), run again and judged (tests/independent_oracle.py).

Prints the programs by kind, the rewrites per rule in each mode, the raising programs gradfix left
failing, and every broken rewrite by kind, rule and shape, with the seeds that show it. Exits 1
when a rewrite broke a program (or a program did not behave as built), so that a scheduled run
fails.

Usage: python benchmarks/fuzz_independent.py [PROGRAMS] [--first-seed N] [--broken FOLDER]
       [--minimise] [--sample]
--broken writes every broken program there (with the rewrite and the verdict) for inspection;
--minimise shrinks the first program of each kind of breakage, part by part, to the smallest the
grammar makes that still breaks the same way, and prints it; --sample prints seeds that cover
every part of the grammar twice (the sample of tests/test_fuzz_independent.py), and runs nothing.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradfix.codemods.execution.runner import ScriptRunner  # noqa: E402
from tests.independent_oracle import Judgement, judge  # noqa: E402
from tests.independent_programs import GRAMMAR, RAISING_KIND, Program, all_parts, generate  # noqa: E402

Signature = tuple[str, str, tuple[str, ...]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", type=int, nargs="?", default=400)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--broken", type=Path, help="a folder for the broken programs")
    parser.add_argument("--minimise", action="store_true")
    parser.add_argument("--sample", action="store_true")
    arguments = parser.parse_args()
    if arguments.sample:
        print(covering_seeds(times=2, candidates=range(arguments.first_seed, arguments.first_seed + 4000)))
        return

    seeds = range(arguments.first_seed, arguments.first_seed + arguments.programs)
    kinds: Counter = Counter()
    rewritten: dict[str, Counter] = {"safe": Counter(), "unsafe": Counter()}
    programs_rewritten: Counter = Counter()
    left_raising = 0
    broken: dict[Signature, list[tuple[Judgement, str]]] = defaultdict(list)
    by_shape: Counter = Counter()
    start = time.perf_counter()
    with ScriptRunner() as runner, tempfile.TemporaryDirectory(prefix="gradfix-fuzz-") as scratch:
        for seed in seeds:
            program = generate(seed)
            judgement = judge(program, runner, Path(scratch))
            kinds[program.kind] += 1
            for mode, rewrite in judgement.rewrites.items():
                rewritten[mode].update(rewrite.codes)
                programs_rewritten[mode] += rewrite.source is not None
            safe = judgement.rewrites.get("safe")
            if program.kind == RAISING_KIND and safe is not None and (safe.outcome or judgement.original).raised_second_backward:
                left_raising += 1
            for signature, rewrite in zip(judgement.signatures(), judgement.broken or [None]):
                shape = program.shapes.get(rewrite.section, "the whole program") if rewrite else "the whole program"
                broken[signature].append((judgement, shape))
                by_shape[signature, shape] += 1
                if arguments.broken:
                    _save(arguments.broken, judgement, signature)
        elapsed = time.perf_counter() - start

        print(f"programs: {sum(kinds.values())} (seeds {seeds.start}-{seeds.stop - 1}) in {elapsed:.0f} s")
        for kind, count in sorted(kinds.items()):
            print(f"  {kind}: {count}")
        for mode, codes in rewritten.items():
            print(f"{mode} rewrites: {programs_rewritten[mode]} programs; fixes by rule: {dict(sorted(codes.items())) or 'none'}")
        print(f"raising programs still failing with the second-backward error after the safe fixes: {left_raising}")
        total = sum(len(found) for found in broken.values())
        print(f"broken: {total}")
        for signature, found in sorted(broken.items(), key=lambda item: -len(item[1])):
            mode, failure, rules = signature
            print(f"  {mode} fixes by {', '.join(rules) or 'no rule'}: {failure}: {len(found)}")
            for (sig, shape), count in sorted(by_shape.items()):
                if sig == signature:
                    print(f"    in {shape}: {count}")
            print(f"    seeds: {', '.join(str(judgement.program.seed) for judgement, _ in found)}")
            print("    first: " + found[0][0].summary().replace("\n", "\n           "))
            if arguments.minimise:
                smallest = minimise(found[0][0].program, lambda candidate: signature in _signatures(candidate, runner, scratch))
                print(f"    smallest program (seed {smallest.seed}, picks {dict(smallest.choices)}):")
                print("".join(f"      {line}\n" for line in smallest.source.splitlines()))
    if broken:
        sys.exit(1)


def _signatures(program: Program, runner: ScriptRunner, scratch: str) -> list[Signature]:
    return judge(program, runner, Path(scratch)).signatures()


def minimise(program: Program, still_broken: Callable[[Program], bool], trials: int = 150) -> Program:
    """The smallest program the grammar makes from ``program``'s seed that ``still_broken``
    holds for: one section if one suffices, then every pick as simple as it can be (the options
    of a part are listed simplest first), within ``trials`` programs judged."""
    best = program
    for label in sorted(program.shapes):
        alone = {"p.program.sections": "1", "p.program.dtype": program.choices["p.program.dtype"]}
        alone |= {"s1." + slot.split(".", 1)[1]: option for slot, option in program.choices.items() if slot.startswith(f"{label}.")}
        candidate = generate(program.seed, alone)
        trials -= 1
        if still_broken(candidate):
            best = candidate
            break
    simpler = True
    while simpler and trials > 0:
        simpler = False
        for slot, option in best.choices.items():
            options = GRAMMAR[slot.split(".", 1)[1]]
            for other in options[: options.index(option)]:
                candidate = generate(best.seed, {**best.choices, slot: other})
                if candidate.choices.get(slot) != other:
                    continue  # not an option where it stands
                trials -= 1
                if still_broken(candidate):
                    best, simpler = candidate, True
                    break
            if simpler or trials <= 0:
                break
    return best


def covering_seeds(times: int, candidates: range) -> list[int]:
    """Seeds whose programs hold every part of the grammar ``times`` times, chosen greedily
    (fewer sections first where the parts are as many)."""
    programs = {seed: generate(seed) for seed in candidates}
    wanted = Counter({part: times for part in all_parts()})
    chosen = []
    while +wanted:
        seed = max(programs, key=lambda s: (sum(wanted[part] > 0 for part in programs[s].parts), -len(programs[s].shapes), -s))
        if not any(wanted[part] > 0 for part in programs[seed].parts):
            break  # some part never appears among the candidates
        chosen.append(seed)
        wanted.subtract(programs.pop(seed).parts)
    return sorted(chosen)


def _save(folder: Path, judgement: Judgement, signature: Signature) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    program = judgement.program
    mode, failure, rules = signature
    name = f"seed{program.seed}_{mode}_{'-'.join(rules) or 'none'}_{failure.replace(' ', '_').replace('=', '')}"
    header = "".join(f"# {line}\n" for line in judgement.summary().splitlines())
    (folder / f"{name}.py").write_text(header + f"# picks: {dict(program.choices)}\n" + program.source)
    rewrite = judgement.rewrites.get(mode)
    if rewrite is not None and rewrite.source is not None:
        diff = difflib.unified_diff(program.source.splitlines(True), rewrite.source.splitlines(True), "program.py", "fixed.py")
        (folder / f"{name}.diff").write_text("".join(diff))


if __name__ == "__main__":
    main()
