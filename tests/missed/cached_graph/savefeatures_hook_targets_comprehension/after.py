# invented: fastai-lesson-style SaveFeatures hooks shared by the style targets and the optimized image
"""Style transfer with SaveFeatures forward hooks (as in fastai's style-transfer
lesson): the hooks keep each block's output on self.features, both when the style
image is run once to build the targets and when the optimized image is run every
step, so the hook itself must keep the graph. The style targets are taken from
the hooks in a list comprehension without a detach, so they carry the feature
network's graph and the second step backwards through it again; the detach
belongs on the targets, not in the hook."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SaveFeatures:
    features = None

    def __init__(self, m):
        self.hook = m.register_forward_hook(self.hook_fn)

    def hook_fn(self, module, input, output):
        self.features = output

    def close(self):
        self.hook.remove()


def gram(x):
    b, c, h, w = x.size()
    x = x.view(b, c, -1)
    return torch.bmm(x, x.transpose(1, 2)) / (c * h * w)


torch.manual_seed(0)
m_vgg = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
block_ends = [1, 4]
sfs = [SaveFeatures(m_vgg[idx]) for idx in block_ends]

style_img = torch.rand(1, 3, 16, 16)
m_vgg(style_img)
targ_styles = [gram(o.features).detach() for o in sfs]

opt_img = torch.rand(1, 3, 16, 16, requires_grad=True)
optimizer = torch.optim.Adam([opt_img], lr=0.05)
for step in range(4):
    optimizer.zero_grad()
    m_vgg(opt_img)
    loss = sum(F.mse_loss(gram(o.features), t) for o, t in zip(sfs, targ_styles)) * 1e3
    loss.backward()
    optimizer.step()
    print(f"step {step}: style loss {loss.item():.4f}")
for sf in sfs:
    sf.close()
