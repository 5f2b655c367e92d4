"""GF005 where the generator's output is an item of the tuple a call returns (``decoded, q_loss =
generate(imgs)``, dome272/VQGAN-pytorch's ``decoded_images, _, q_loss = self.vqgan(imgs)``): it is
the generator's output where the callee's returns, read by gradfix, prove that item holds the
generator's graph. Each test pairs a program the rule finds with the variant that hides one fact
the finding rests on; every program is run."""

import sys
import types
from pathlib import Path

import pytest
import torch

import gradfix
from gradfix.codemods.check import check_file, module_exports
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixKind, FixMode

HEADER = """\
import torch
from torch import nn
import torch.nn.functional as F
{imports}
torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
disc = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
{generate}
opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
imgs = torch.randn(16, 4)
leaks = []
"""
GENERATE = """\
def generate(x):
    out = gen(x)
    return {items}
"""
ITEMS = "out, out.pow(2).mean()"
# The discriminator steps first, as in the DCGAN example: its backward frees the generator's graph.
DISCRIMINATOR_FIRST = """\
for step in range(3):
    decoded, q_loss = generate(imgs)
    d_loss = torch.mean(F.relu(1.0 - disc(imgs))) + torch.mean(F.relu(1.0 + disc(decoded)))
    opt_d.zero_grad()
    d_loss.backward({retain})
    opt_d.step()
    g_loss = (imgs - decoded).abs().mean() + q_loss - torch.mean(disc(decoded))
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
"""
# VQGAN's order: the generator's loss backwarded keeping the graph, then the discriminator's
# through one prediction both losses read, before the generator's optimizer steps.
GENERATOR_FIRST = """\
for step in range(3):
    decoded, q_loss = generate(imgs)
    disc_fake = disc(decoded)
    vq_loss = (imgs - decoded).abs().mean() + q_loss - 0.1 * torch.mean(disc_fake)
    gan_loss = torch.mean(F.relu(1.0 - disc(imgs))) + torch.mean(F.relu(1.0 + disc_fake))
    opt_g.zero_grad()
    vq_loss.backward(retain_graph=True)
    own = [p.grad.clone() for p in gen.parameters()]
    opt_d.zero_grad()
    gan_loss.backward()
    leaks.append(max((p.grad - g).abs().max().item() for p, g in zip(gen.parameters(), own)))
    opt_g.step()
    opt_d.step()
"""


def _program(loop: str = DISCRIMINATOR_FIRST, items: str = ITEMS, imports: str = "", retain: str = "", generate: str | None = None) -> str:
    generate = GENERATE.format(items=items) if generate is None else generate
    return HEADER.format(imports=imports, generate=generate) + loop.format(retain=retain)


FOUND = _program()


@pytest.fixture(autouse=True)
def _unread_packages(monkeypatch):
    """Two packages gradfix does not read: ``generators.generate`` (the file's ``generate``, taking
    the generator as an argument) and ``postprocess.clamp`` (keeps the graph it is given)."""
    generators = types.ModuleType("generators")
    generators.generate = lambda gen, x: (gen(x), gen(x).pow(2).mean())  # type: ignore[attr-defined]
    postprocess = types.ModuleType("postprocess")
    postprocess.clamp = lambda t: t.clamp(-10.0, 10.0)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "generators", generators)
    monkeypatch.setitem(sys.modules, "postprocess", postprocess)


def _found(source: str) -> list[tuple[str, bool, bool]]:
    """(code, hint, has a safe fix) of every finding, hints included."""
    return [(f.code, f.hint, f.fix is not None and f.fix.value == "safe") for f in gradfix.check(source, hints=True).findings]


def _run(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "program.py", "exec"), namespace)
    return namespace


def _raises_freed(source: str) -> bool:
    try:
        _run(source)
    except RuntimeError as error:
        assert "backward through the graph a second time" in str(error)
        return True
    return False


def _trained(source: str) -> list[torch.Tensor]:
    namespace = _run(source)
    return [p.detach().clone() for module in ("gen", "disc") for p in namespace[module].parameters()]


def test_an_item_of_a_function_of_the_file_is_the_generators_output_and_its_fix_trains_each_on_its_own_loss():
    assert _raises_freed(FOUND)
    assert _found(FOUND) == [("GF005", False, True)]
    fixed = gradfix.fix(FOUND).source
    assert "torch.mean(F.relu(1.0 + disc(decoded.detach())))" in fixed and fixed.count(".detach()") == 1
    # The discriminator's backward stops at ``decoded``: the generator trains on its own loss only,
    # as the run that keeps the graph (whose ``opt_g.zero_grad()`` drops what D's loss wrote into
    # the generator) trains both.
    kept = _program(retain="retain_graph=True")
    assert all(torch.equal(a, b) for a, b in zip(_trained(fixed), _trained(kept)))
    assert not all(torch.equal(a, b) for a, b in zip(_trained(fixed), _trained(_program(items="out.detach(), out.pow(2).mean()"))))


def test_a_generator_gradfix_did_not_read_is_no_generators_output():
    assert _found(FOUND) == [("GF005", False, True)]
    imported = _program(imports="from generators import generate", generate="").replace("generate(imgs)", "generate(gen, imgs)")
    assert _raises_freed(imported)
    # (GF002 still says the two losses may share a graph, as a hint: they share it only through
    # `generate`, which may hand back a copy without it; it asks for no detach of the generator's)
    assert _found(imported) == [("GF002", True, False)]
    assert gradfix.fix(imported).source == imported


def test_an_item_built_by_code_gradfix_did_not_read_is_no_generators_output():
    assert _found(FOUND) == [("GF005", False, True)]
    clamped = _program(imports="from postprocess import clamp", items="clamp(out), out.pow(2).mean()")
    assert _raises_freed(clamped)
    # (the losses share the generator's graph only through ``clamp``, which may hand back a copy
    # without it: a hint, as where ``generate`` itself is another package's)
    assert _found(clamped) == [("GF002", True, False)]
    assert gradfix.fix(clamped).source == clamped


def test_an_item_that_holds_no_graph_of_the_generator_is_no_generators_output():
    assert _found(FOUND) == [("GF005", False, True)]
    # ``decoded`` detached by the callee: D's loss never reaches the generator, and it runs.
    detached = _program(items="out.detach(), out.pow(2).mean()")
    assert not _raises_freed(detached)
    assert _found(detached) == []
    # D reads the item of the callee's own graph (``q_loss``'s codebook term), built from no node
    # of what D reads: only the item D reads of the generator is the generator's output.
    two_parts = _program(
        generate="codebook = nn.Linear(4, 4)\n\n\ndef generate(x):\n    return gen(x), codebook(x).pow(2).mean()\n",
    )
    assert _raises_freed(two_parts)
    fixed = gradfix.fix(two_parts).source
    assert "disc(decoded.detach())" in fixed and "q_loss.detach()" not in fixed and fixed.count(".detach()") == 1
    _run(fixed)


def test_an_item_built_apart_by_a_call_that_runs_the_discriminator_is_not_detached():
    # ``decoded`` shares no node with ``q_loss``: it stands for its own part of the call, and the
    # call also runs ``disc``, which D's optimizer trains: a detach would cut D's own gradient.
    generate = "codebook = nn.Linear(4, 4)\n\n\ndef generate(x):\n    return codebook(x).pow(2).mean(), gen(x) + 0.1 * disc(gen(x))\n"
    source = _program(generate=generate).replace("decoded, q_loss = generate(imgs)", "q_loss, decoded = generate(imgs)")
    assert _raises_freed(source)
    assert _found(source) == [("GF005", False, False)]
    assert gradfix.fix(source).source == source
    # (the detach would change the gradient D's own loss gives D)
    gen, disc, real = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1), torch.randn(16, 4)
    decoded = gen(real) + 0.1 * disc(gen(real))
    grads = []
    for read in (decoded, decoded.detach()):
        disc.zero_grad()
        torch.nn.functional.relu(1.0 + disc(read)).mean().backward(retain_graph=True)
        grads.append(disc.weight.grad.clone())
    assert not torch.allclose(*grads)
    # Built apart by a call that runs only the generator, the item is detached.
    apart = source.replace("gen(x) + 0.1 * disc(gen(x))", "gen(x)")
    fixed = gradfix.fix(apart).source
    assert "disc(decoded.detach())" in fixed and fixed.count(".detach()") == 1
    _run(fixed)


def test_an_item_taken_by_its_index_is_the_generators_output():
    taken = FOUND.replace("decoded, q_loss = generate(imgs)", "decoded = generate(imgs)[0]\n    q_loss = 0.0")
    assert _raises_freed(taken)
    assert _found(taken) == [("GF005", False, True)]
    fixed = gradfix.fix(taken).source
    assert "disc(decoded.detach())" in fixed and fixed.count(".detach()") == 1
    kept = taken.replace("d_loss.backward()", "d_loss.backward(retain_graph=True)")
    assert all(torch.equal(a, b) for a, b in zip(_trained(fixed), _trained(kept)))
    # Of a generator gradfix did not read, which item holds its graph is a guess.
    imported = _program(imports="from generators import generate", generate="").replace(
        "decoded, q_loss = generate(imgs)", "decoded = generate(gen, imgs)[0]\n    q_loss = 0.0"
    )
    assert _raises_freed(imported)
    assert "GF005" not in [code for code, _, _ in _found(imported)]
    assert gradfix.fix(imported).source == imported


def test_vqgans_order_is_reported_and_the_right_order_is_not():
    vqgan = _program(GENERATOR_FIRST)
    namespace = _run(vqgan)
    assert min(namespace["leaks"]) > 0.01  # (D's loss writes into the generator every step)
    assert _found(vqgan) == [("GF005", False, False)]
    # The discriminator's step first, keeping the graph: the generator's ``zero_grad`` drops what
    # D's loss wrote into it before its own backward, which reads its own prediction.
    right = _program(retain="retain_graph=True")
    assert not _raises_freed(right)
    assert [code for code, _, _ in _found(right)] != ["GF005"]


def test_the_class_form_of_vqgan_is_reported():
    source = (
        "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n\n"
        + MODELS[MODELS.index("class VQ") :]
        + """

class Trainer:
    def __init__(self):
        self.vqgan = VQ()
        self.discriminator = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.opt_vq = torch.optim.Adam(self.vqgan.parameters())
        self.opt_disc = torch.optim.Adam(self.discriminator.parameters())
        self.leaks = []

    def train(self, imgs):
        for step in range(3):
            decoded, q_loss = self.vqgan(imgs)
            disc_fake = self.discriminator(decoded)
            vq_loss = (imgs - decoded).abs().mean() + q_loss - 0.1 * torch.mean(disc_fake)
            gan_loss = torch.mean(F.relu(1.0 - self.discriminator(imgs))) + torch.mean(F.relu(1.0 + disc_fake))
            self.opt_vq.zero_grad()
            vq_loss.backward(retain_graph=True)
            own = [p.grad.clone() for p in self.vqgan.parameters()]
            self.opt_disc.zero_grad()
            gan_loss.backward()
            self.leaks.append(max((p.grad - g).abs().max().item() for p, g in zip(self.vqgan.parameters(), own)))
            self.opt_vq.step()
            self.opt_disc.step()


trainer = Trainer()
trainer.train(torch.randn(16, 4))
"""
    )
    assert min(_run(source)["trainer"].leaks) > 0.01
    assert _found(source) == [("GF005", False, False)]
    imported = source.replace("class VQ(nn.Module):", "from vq_models import VQ\n\n\nclass Unused(nn.Module):")
    assert _found(imported) == []


MODELS = """\
import torch.nn as nn


class VQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.decoder = nn.Linear(8, 4)

    def forward(self, x):
        h = self.encoder(x)
        return self.decoder(h), h.pow(2).mean()
"""


def _project_file(tmp_path, models: str) -> Path:
    """``train.py`` importing ``VQ`` from ``models.py`` of its project (the layout of VQGAN-pytorch)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "models.py").write_text(models)
    train = _program(imports="from models import VQ", generate="vq = VQ()\n").replace("generate(imgs)", "vq(imgs)")
    train = train.replace("gen.parameters()", "vq.parameters()")
    (tmp_path / "train.py").write_text(train)
    return tmp_path / "train.py"


def test_an_item_of_a_class_of_another_module_of_the_project_is_the_generators_output(tmp_path):
    exported = module_exports(MODELS.encode())["VQ"].module_class
    assert exported is not None and exported.returned_items is not None
    assert [(item.graph, item.guessed, item.tensor) for item in exported.returned_items] == [(True, False, True), (True, False, True)]
    train = _project_file(tmp_path, MODELS)
    source = train.read_text()
    sys.modules.pop("models", None)
    sys.path.insert(0, str(tmp_path))
    try:
        assert _raises_freed(source)
        assert [(f.code, f.fix, f.hint) for f in check_file(train, all_rules()).findings] == [("GF005", FixKind.SAFE, False)]
        fixed = check_file(train, all_rules(), FixMode.SAFE).rewritten.decode()
        assert "disc(decoded.detach())" in fixed and fixed.count(".detach()") == 1
        _run(fixed)
        # The item built by code of a package gradfix did not read: only a guess of which holds what.
        (tmp_path / "hidden").mkdir()
        clamped = MODELS.replace("return self.decoder(h)", "return clamp(self.decoder(h))")
        hidden = _project_file(
            tmp_path / "hidden", clamped.replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom postprocess import clamp\n")
        )
        assert "GF005" not in [f.code for f in check_file(hidden, all_rules()).findings if not f.hint]
        assert check_file(hidden, all_rules(), FixMode.SAFE).rewritten is None
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("models", None)
