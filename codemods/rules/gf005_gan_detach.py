from __future__ import annotations

from typing import Iterator, cast

import libcst as cst
from libcst import CSTNodeT

from ..analysis import (
    NO_GRADIENT_HOOKS,
    GanSteps,
    NO_BOOKKEEPING_READS,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    READS_MODELLED_CODE,
    argument,
    code_of,
    detached,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation


class GanDetach(Rule):
    """
    What it finds: A GAN's discriminator step backwards through the generator's output without
    ``.detach()``. ``fake = G(z)`` feeds the discriminator's loss (``D(fake)`` against zeros) and the
    generator's loss (``D(fake)`` against ones). ``fake`` may be one item of the tuple ``G`` returns
    (``fake, q_loss = G(z)``, ``G(z)[0]``) where gradfix reads ``G``'s returns and they prove that
    item holds its graph; of a ``G`` gradfix did not read, which item holds it is a guess.

    Why it fails: Backwarding the discriminator's loss walks into the generator and frees its graph;
    the generator step then raises ``RuntimeError: Trying to backward through the graph a second
    time`` (in either order of the two steps). ``retain_graph=True`` makes it run, but the
    discriminator's loss then also writes gradients into the generator's parameters.

    The fix: the one of the PyTorch DCGAN example: the discriminator sees ``fake.detach()`` at every
    place its own loss reads the generator's output (its prediction, a gradient penalty's
    interpolation ``alpha * real + (1 - alpha) * fake``), so its backward stops at the generator's
    output; the generator step keeps ``D(fake)`` and trains through it. Both optimizers step as
    before.

    When gradfix only reports: When one prediction on ``fake`` is reused by both losses (a
    relativistic GAN's ``pred_fake`` computed once), no single detach fixes it: gradfix reports, and
    the fix is two predictions, one on ``fake.detach()`` for the discriminator step and one on
    ``fake`` for the generator step (a prediction computed again for the generator step alone still
    lets the discriminator's backward reach the generator, after its optimizer changed its weights).
    The discriminator is the module the optimizer stepped after its loss trains (a loss module run
    on a prediction in both steps trains nothing and is none; ``D.forward(x)`` runs ``D`` as
    ``D(x)`` does). The detach is written only where gradfix can name what that optimizer trains
    and nothing of it builds ``fake`` (read through the file's functions and methods that build
    it): a detach there would also cut the discriminator's own gradient. Lightning's
    ``self.optimizers()`` hands back what the module's own ``configure_optimizers`` returns, by
    position; where gradfix cannot read that return, what each optimizer trains is unknown.
    """

    SUMMARY = "the discriminator step backwards through the generator's output"
    FIX = FixKind.SAFE
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_BOOKKEEPING_READS, NO_CAUGHT_ERRORS)
    EXAMPLE_BEFORE = """\
generator = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
discriminator = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g = torch.optim.Adam(generator.parameters())
opt_d = torch.optim.Adam(discriminator.parameters())
bce = nn.BCEWithLogitsLoss()
for real in loader:
    fake = generator(torch.randn(len(real), 16))
    opt_d.zero_grad()
    d_loss = bce(discriminator(real), ones) + bce(discriminator(fake), zeros)
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(discriminator(fake), ones)
    g_loss.backward()
    opt_g.step()
"""
    EXAMPLE_AFTER = """\
generator = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
discriminator = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g = torch.optim.Adam(generator.parameters())
opt_d = torch.optim.Adam(discriminator.parameters())
bce = nn.BCEWithLogitsLoss()
for real in loader:
    fake = generator(torch.randn(len(real), 16))
    opt_d.zero_grad()
    d_loss = bce(discriminator(real), ones) + bce(discriminator(fake.detach()), zeros)
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(discriminator(fake), ones)
    g_loss.backward()
    opt_g.step()
"""

    def violations(self) -> Iterator[Violation]:
        reported: set[cst.Call] = set()
        for steps in self.analysis.gan_steps:
            d_step = steps.discriminator_step
            if d_step.retain_graph is not False or argument(d_step.call, None, "inputs") is not None:
                continue  # the graph is kept, or the gradients confined, on purpose
            if d_step.call in reported:
                continue  # (a generator step written twice, in two branches of one expression)
            reported.add(d_step.call)
            message = (
                f"`{code_of(d_step.tensor or d_step.call)}` (the discriminator step) backwards through "
                f"`{steps.generator_output}`, the generator's output, which the generator step at line "
                f"{self.analysis.line(steps.generator_step.call)} backwards too; "
            )
            if steps.reused:
                message += (
                    f"`{code_of(steps.reused[0])}` is used by both losses: give the discriminator step its own prediction "
                    f"on `{steps.generator_output}.detach()`, and the generator step its own on `{steps.generator_output}`"
                )
            else:
                message += f"give the discriminator `{steps.generator_output}.detach()`"
                if steps.unfixable:
                    message += f" (not rewritten: {steps.unfixable})"
            # A discriminator loss built by code gradfix did not read may not reach the generator's output.
            unread = f"`{code_of(d_step.tensor or d_step.call)}` comes out of code gradfix did not read, and may not hold the generator's graph"
            yield self.violation(
                d_step.call,
                message,
                self._fix(steps),
                related=(steps.generator_step.call, *steps.detach_at),
                sites=(d_step, steps.generator_step),
                guess=unread if d_step.value.unread else "",
            )

    def _fix(self, steps: GanSteps) -> Fix | None:
        if steps.reused or steps.unfixable or not steps.detach_at:
            return None
        reads: dict[cst.SimpleStatementLine, dict[cst.CSTNode, cst.CSTNode]] = {}
        for name in steps.detach_at:
            statement = self.analysis.statement_of(name)
            replacement = detached(name)
            if statement is None or replacement is None or self.analysis.block_of(statement) is None:
                return None
            reads.setdefault(statement, {})[name] = replacement
        return Fix(
            safe=True,
            replace=tuple(
                (statement, cst.ensure_type(statement.visit(_ReplaceNodes(names)), cst.SimpleStatementLine)) for statement, names in reads.items()
            ),
        )


class _ReplaceNodes(cst.CSTTransformer):
    """Swaps nodes of the original tree (by identity) for their rewrites, all in one pass."""

    def __init__(self, replacements: dict[cst.CSTNode, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: CSTNodeT, updated_node: CSTNodeT) -> CSTNodeT | cst.RemovalSentinel | cst.FlattenSentinel[CSTNodeT]:
        replacement = self.replacements.get(original_node)
        # LibCST types a transformer's result as the node it leaves; a rewrite puts another kind of
        # expression there (``fake`` becomes ``fake.detach()``), which any place of an expression takes.
        return updated_node if replacement is None else cast(CSTNodeT, replacement)
