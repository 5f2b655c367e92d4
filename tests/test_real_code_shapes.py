"""Shapes met in real projects (pytorch-examples-like scripts, DeepSpeed examples, Accelerate's own
tests) that train correctly: gradfix must not report them, let alone rewrite them."""

import textwrap

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods.registry import all_rules

CORRECT = {
    # An output mode chosen from a dict: the if/elif assigns the loss on every real path.
    "loss_from_an_exhaustive_if_elif": """
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x, y in loader:
                logits = model(x)
                if output_mode == "classification":
                    loss = torch.nn.functional.cross_entropy(logits, y)
                elif output_mode == "regression":
                    loss = torch.nn.functional.mse_loss(logits.view(-1), y.float())
                loss = loss / accumulation
                loss.backward()
                optimizer.step()
    """,
    # A compiled extension's backward function is not autograd's.
    "extension_kernel_backward": """
        import softmax_kernels
        inputs = torch.randn(4, 4, requires_grad=True)
        out = torch.softmax(inputs, -1)
        grad = torch.rand_like(out)
        kernel_grad = softmax_kernels.backward(grad, out, 1.0)
        out.backward(grad)
    """,
    # The engine and optimizer deepspeed.initialize returns are objects, not graphs.
    "deepspeed_engine_and_wrapper_backward": """
        import deepspeed
        model = torch.nn.Linear(4, 2)
        model = DDP(model)
        model, optimizer, _, _ = deepspeed.initialize(args=args, model=model)
        for step, (x, y) in enumerate(loader):
            loss = model(x).sum()
            if fp16:
                optimizer.backward(loss)
            else:
                loss.backward()
            optimizer.step()
    """,
    # A module wrapped by a helper that is given another module too.
    "module_rebound_by_a_wrapper": """
        model = torch.nn.Linear(2, 1)
        teacher = torch.nn.Linear(2, 1)
        model = compress(model, teacher)
        for x in data:
            loss = forward_loss(x, model)
            loss.backward()
    """,
    # Losses collected in one loop, each backwarded once in another.
    "list_of_losses_backwarded_one_by_one": """
        model = torch.nn.Linear(2, 2)
        losses = []
        for x, y in batches:
            losses.append(torch.nn.functional.mse_loss(model(x), y))
        for i in range(len(losses)):
            loss = losses[i]
            loss.backward()
    """,
    # A loader built by a call that was given the model yields data, not graphs.
    "loader_from_a_call_given_the_model": """
        model = torch.nn.Linear(2, 2)
        loader = make_loader(model=model, data=data)
        start = load_checkpoint(directory, model)
        for step, batch in enumerate(loader, start=start):
            loss = model(batch).sum()
            loss.backward()
    """,
    # An epoch loop that calls train() and a scheduler: the loss train() returns is a number.
    "epoch_losses_from_a_train_function": """
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
        losses = torch.empty(3)
        for epoch in range(3):
            this_loss = train(loader, model, optimizer)
            losses[epoch] = this_loss
            scheduler.step()
    """,
    # The generator's output reaches the first loss through a discriminator method, and the
    # second loss through the encoder: the first backward's retain_graph=True is needed.
    "retain_needed_through_a_module_method": """
        generator, encoder, critic = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        optimizer = torch.optim.Adam(generator.parameters())
        for real in data:
            fake = generator(real)
            loss_ge = critic.compute_loss(fake, real)
            loss_ge.backward(retain_graph=True)
            optimizer.step()
            loss_latent = encoder(fake).abs().mean()
            loss_latent.backward()
    """,
}

# Losses unpacked from one call, each trained by its own optimizer (soft actor-critic): whether
# they share a graph is not known, so no backward may be dropped or merged.
UNPACKED_LOSSES = """
    policy, critic = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    policy_optim = torch.optim.Adam(policy.parameters())
    q_optim = torch.optim.Adam(critic.parameters())

    def compute_losses(batch):
        policy_loss = policy(batch).mean()
        q_loss = torch.nn.functional.mse_loss(critic(batch), batch[:, :1])
        return policy_loss, q_loss

    policy_loss, q_loss = compute_losses(batch)
    policy_optim.zero_grad()
    policy_loss.backward()
    policy_optim.step()
    q_optim.zero_grad()
    q_loss.backward()
    q_optim.step()
"""


def test_losses_unpacked_from_one_call_are_never_rewritten():
    source = b"import torch\n" + textwrap.dedent(UNPACKED_LOSSES).encode()
    report = check_source(source, all_rules(), FixMode.UNSAFE, "sac.py")
    assert report.rewritten is None and "GF001" not in [f.code for f in report.findings]


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_real_code_shapes_are_left_alone(name):
    source = b"import torch\n" + textwrap.dedent(CORRECT[name]).encode()
    report = check_source(source, all_rules(), FixMode.UNSAFE, f"{name}.py")
    assert report.findings == [] and report.rewritten is None and report.internal_errors == []


# torch-light's image captioning: an actor and a critic built in one tuple assignment, each starting
# from the encoder's output through its own `.data` (the critic trains on its own graph only).
ACTOR_AND_CRITIC = """
    import torch.nn.functional as F

    class Captioner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Linear(8, 4)
            self.cell = torch.nn.LSTMCell(4, 4)
            self.out = torch.nn.Linear(4, 5)

        def encode(self, images):
            return self.encoder(images)

        def start_state(self, code):
            return {actor_start}

        def forward(self, state):
            state = self.cell(torch.zeros(state[0].size(0), 4), state)
            return F.log_softmax(self.out(state[0]), -1)

    class Scorer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.value = torch.nn.Linear(4, 1)

        def start_state(self, code):
            return {critic_start}

        def forward(self, state):
            return self.value(state).squeeze(1)

    {built}
    actor_optimizer = torch.optim.Adam(actor.parameters())
    critic_optimizer = torch.optim.Adam(critic.parameters())
    for images, labels, rewards in batches:
        actor_optimizer.zero_grad()
        critic_optimizer.zero_grad()
        code = actor.encode(images)
        log_probs = actor(actor.start_state(code))
        estimate = critic(critic.start_state(code))
        critic_loss = F.mse_loss(estimate, rewards)
        critic_loss.backward()
        critic_optimizer.step()
        actor_loss = F.nll_loss(log_probs, labels)
        actor_loss.backward()
        actor_optimizer.step()
"""


@pytest.mark.parametrize("built", ["actor, critic = Captioner(), Scorer()", "actor = Captioner()\ncritic = Scorer()"])
def test_instances_built_in_one_tuple_assignment_are_read_as_built_one_by_one(built):
    def checked(actor_start: str, critic_start: str) -> list[str]:
        code = textwrap.dedent(ACTOR_AND_CRITIC).format(actor_start=actor_start, critic_start=critic_start, built="{built}")
        source = b"import torch\n" + code.replace("{built}", built).encode()
        report = check_source(source, all_rules(), FixMode.UNSAFE, "train.py")
        return [f.code for f in [*report.findings, *report.fixed]]

    detached = "(code.data.clone(), torch.zeros_like(code.data))"
    assert checked(detached, "code.data.clone()") == []  # each loss walks its own graph
    assert checked(detached, "code") == []  # only the critic's reaches the encoder
    assert checked("(code, torch.zeros_like(code))", "code") == ["GF002"]  # both do: the second backward fails


def test_a_carried_name_first_bound_inside_the_loop_is_not_detached_before_it_exists():
    source = textwrap.dedent(
        """
        import torch
        model = torch.nn.Linear(2, 2)
        for epoch in range(2):
            for x in data:
                if reset:
                    loss = model(x).sum()
                loss = loss * 2
                loss.backward()
        """
    ).encode()
    report = check_source(source, all_rules(), FixMode.UNSAFE, "train.py")
    assert report.rewritten is None and [f.code for f in report.findings] == ["GF004"]
