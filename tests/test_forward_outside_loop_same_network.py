"""A forward made before the loop by a network the loop calls itself, on any inputs, may be meant as
that network's outputs before training: PPO's log-probabilities of the policy that collected the
trajectory, kept without ``.detach()`` (Deep-RL-Hands-On's PPO, mutated; h96's review). GF003's safe
fix moved it into the batch loop, where it equals the new log-probability at the same weights, and
the policy stopped training; only a call written the same was told apart. Now a call of the same
network whose value the loop puts against the one made before it (``logprob - old_logprob``, two
arguments of one call) leaves the finding unrewritten. A loop that calls no such network, or only
adds the value made before it as a term of its own (an anchor regularizer), keeps the safe move."""

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PPO = """\
import torch
from torch import nn

torch.manual_seed(0)
actor = nn.Linear(3, 2)
opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
states, actions, advantages = torch.randn(32, 3), torch.randn(32, 2), torch.randn(32, 1)
old_logprob = -(actor(states) - actions).pow(2)
for epoch in range(2):
    for start in range(0, 32, 8):
        batch = slice(start, start + 8)
        NEW
        ratio = torch.exp(logprob - old_logprob[batch])
        loss = -torch.min(advantages[batch] * ratio, advantages[batch] * ratio.clamp(0.8, 1.2)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"


def test_a_forward_of_the_network_the_loop_calls_is_not_moved(runs, tmp_path):
    source = PPO.replace("NEW", "logprob = -(actor(states[batch]) - actions[batch]).pow(2)")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF003", mode=FixMode.SAFE)
    assert "the loop computes `actor(states[batch])` itself" in finding.message and "not rewritten" in finding.message
    assert check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py").rewritten is None


def test_a_loop_that_calls_no_such_network_keeps_the_safe_move(runs, tmp_path):
    source = PPO.replace("NEW", "logprob = -actions[batch].pow(2)")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    fixed = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in fixed.fixed] == ["GF003"]
    assert run_error(runs, tmp_path, (fixed.rewritten or b"").decode()) == ""


def test_a_forward_of_the_network_the_loop_adds_as_a_term_of_its_own_is_moved(runs, tmp_path):
    # (an anchor regularizer: the loop compares nothing with it, only adds its penalty)
    source = PPO.replace("NEW", "logprob = -(actor(states[batch]) - actions[batch]).pow(2)").replace(
        "ratio = torch.exp(logprob - old_logprob[batch])", "ratio = torch.exp(logprob) + old_logprob[batch].mean()"
    )
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    fixed = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in fixed.fixed] == ["GF003"]
    assert run_error(runs, tmp_path, (fixed.rewritten or b"").decode()) == ""


def test_values_that_meet_in_a_container_may_be_compared(runs, tmp_path):
    # (no ``-`` between them is written out: they meet in one stack, which is no sum of separate terms)
    source = PPO.replace("NEW", "logprob = -(actor(states[batch]) - actions[batch]).pow(2)").replace(
        "ratio = torch.exp(logprob - old_logprob[batch])",
        "both = torch.stack([logprob, old_logprob[batch]])\n        ratio = torch.exp(both[0] - both[1])",
    )
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF003", mode=FixMode.SAFE)
    assert "not rewritten" in finding.message
