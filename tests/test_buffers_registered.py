"""``self.register_buffer("w_avg", torch.zeros(4))`` binds ``self.w_avg`` to that tensor: an in-place
update of the buffer from a detached value (stylegan2-ada's ``self.w_avg.copy_(x.detach().mean(0)
.lerp(self.w_avg, beta))``) keeps no graph, where gradfix read the buffer as an object it did not know
and hinted GF004 (h95's review). An in-place method writes to what its chain of in-place methods
starts from (``self.embed_avg.mul_(decay).add_(embed_sum)``), and into a tensor's ``.data`` no graph
(vq-vae-2's ``self.embed.data.copy_(...)``, h93's review). A buffer updated in place from the
encoder's graph without ``.data`` keeps every step's graph: still reported; one registered under a
name gradfix cannot read is an object it did not see bound, a hint as before."""

import pytest

from gradfix.codemods.torch_api import REGISTERING_METHODS

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

QUANTIZE = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Quantize(nn.Module):
    def __init__(self, dim, n_embed, decay=0.99):
        super().__init__()
        self.decay = decay
        embed = torch.randn(dim, n_embed)
        self.register_buffer(NAME, embed)
        self.register_buffer("embed_avg", embed.clone())

    def forward(self, x):
        flatten = x.reshape(-1, self.embed.shape[0])
        _, index = (-torch.cdist(flatten, self.embed.t())).max(1)
        onehot = F.one_hot(index, self.embed.shape[1]).type(flatten.dtype)
        quantize = F.embedding(index, self.embed.transpose(0, 1))
        embed_sum = flatten.transpose(0, 1) @ onehot
        self.embed_avg.DATAmul_(self.decay).add_(embed_sum, alpha=1 - self.decay)
        self.embed.data.copy_(self.embed_avg)
        return x + (quantize - x).detach()


torch.manual_seed(0)
encoder = nn.Linear(4, 4)
quantizer = Quantize(4, 5)
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
for step in range(3):
    opt.zero_grad()
    quantizer(encoder(torch.randn(6, 4))).pow(2).mean().backward()
    opt.step()
assert quantizer.embed_avg.grad_fn is None, "a graph is kept"
"""


def test_buffers_updated_through_data_keep_no_graph(runs, tmp_path):
    source = QUANTIZE.replace("NAME", '"embed"').replace("DATA", "data.")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []


def test_a_buffer_updated_in_place_from_the_encoders_graph_keeps_every_step(runs, tmp_path):
    source = QUANTIZE.replace("NAME", '"embed"').replace("DATA", "")
    assert "a graph is kept" in run_error(runs, tmp_path, source)
    assert [f.line for f in findings_of(source, "GF004")] == [20]


W_AVG = """\
import torch
import torch.nn as nn


class Mapping(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("w_avg", torch.zeros(4))

    def forward(self, z):
        x = self.fc(z)
        self.w_avg.copy_(x.detach().mean(dim=0).lerp(self.w_avg, 0.99))
        return x


mapping = Mapping()
opt = torch.optim.SGD(mapping.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    mapping(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
"""


def test_a_buffer_updated_in_place_from_a_detached_value_keeps_no_graph(runs, tmp_path):
    assert run_error(runs, tmp_path, W_AVG) == ""
    assert findings_of(W_AVG, "GF004") == []


def test_a_buffer_registered_under_a_name_gradfix_cannot_read_is_an_object_it_did_not_see():
    source = W_AVG.replace('self.register_buffer("w_avg"', 'self.register_buffer("w_" + "avg"')
    assert [(f.code, f.hint) for f in findings_of(source, "GF004")] == [("GF004", True)]


@pytest.mark.parametrize("method", sorted(REGISTERING_METHODS))
def test_each_registering_method_binds_the_attribute_it_names(method):
    module = torch.nn.Module()
    value = torch.nn.Parameter(torch.zeros(2))
    getattr(module, method)("kept", value)
    assert module.kept is value
