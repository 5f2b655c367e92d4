# https://pytorch.org/tutorials/advanced/neural_style_tutorial.html
"""The neural style tutorial's StyleLoss without the .detach() the tutorial
explains ("we 'detach' the target ... from the tree used to dynamically compute
the gradient: this is a stated value, not a variable. Otherwise the forward
method of the criterion will throw an error"). The target Gram matrix is built in
__init__ from the CNN's features of the style image, whose weights require grad,
so the second LBFGS closure backwards through the graph the first one freed."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super().__init__()
        self.target = gram_matrix(target_feature)

    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input


def get_style_model_and_losses(cnn, style_img, content_img, content_layers=("conv_2",), style_layers=("conv_1", "conv_2", "conv_3")):
    content_losses, style_losses = [], []
    model = nn.Sequential()
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = f"conv_{i}"
        elif isinstance(layer, nn.ReLU):
            name = f"relu_{i}"
            layer = nn.ReLU(inplace=False)
        else:
            name = f"pool_{i}"
        model.add_module(name, layer)

        if name in content_layers:
            target = model(content_img)
            content_loss = ContentLoss(target)
            model.add_module(f"content_loss_{i}", content_loss)
            content_losses.append(content_loss)

        if name in style_layers:
            target_feature = model(style_img)
            style_loss = StyleLoss(target_feature)
            model.add_module(f"style_loss_{i}", style_loss)
            style_losses.append(style_loss)
    return model, style_losses, content_losses


def run_style_transfer(cnn, content_img, style_img, input_img, num_steps=6, style_weight=1000000, content_weight=1):
    model, style_losses, content_losses = get_style_model_and_losses(cnn, style_img, content_img)
    input_img.requires_grad_(True)
    optimizer = torch.optim.LBFGS([input_img], max_iter=3)
    run = [0]
    while run[0] <= num_steps:

        def closure():
            with torch.no_grad():
                input_img.clamp_(0, 1)
            optimizer.zero_grad()
            model(input_img)
            style_score = sum(sl.loss for sl in style_losses) * style_weight
            content_score = sum(cl.loss for cl in content_losses) * content_weight
            loss = style_score + content_score
            loss.backward()
            run[0] += 1
            return style_score + content_score

        optimizer.step(closure)
    with torch.no_grad():
        input_img.clamp_(0, 1)
    return input_img


torch.manual_seed(0)
cnn = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
    nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
).eval()
style_img = torch.rand(1, 3, 16, 16)
content_img = torch.rand(1, 3, 16, 16)
output = run_style_transfer(cnn, content_img, style_img, content_img.clone())
print(f"output mean {output.mean().item():.4f}")
