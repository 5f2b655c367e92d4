# https://github.com/IceLab-X/MiniGP/issues/13
"""MiniGP's spatio-temporal GP demo: SE_kernel.__init__ stores
torch.exp(nn.Parameter(log(length_scale))), a tensor computed once from a
parameter that is never registered, so the length scale is meant to train but
cannot, and every epoch's NLL backwards through the same ExpBackward node. The
second epoch raises the error. Appending .detach() would hide the error and
freeze the length scale for good; the fix (as in the thread) is to register the
log-parameter and take the exp in forward, so this is only reported."""
import torch
import torch.nn as nn

JITTER = 1e-1


def kronecker(A, B):
    AB = torch.einsum("ab,cd->acbd", A, B)
    return AB.view(A.size(0) * B.size(0), A.size(1) * B.size(1))


class SE_kernel(nn.Module):
    def __init__(self, length_scale=1.0):
        super().__init__()
        self.length_scale = torch.exp(nn.Parameter(torch.log(torch.tensor(length_scale))))

    def forward(self, X, X2):
        X = X / self.length_scale.expand(X.size(0), X.size(1))
        X2 = X2 / self.length_scale.expand(X2.size(0), X2.size(1))
        X_norm2 = torch.sum(X * X, dim=1).view(-1, 1)
        X2_norm2 = torch.sum(X2 * X2, dim=1).view(-1, 1)
        K = -2.0 * X @ X2.t() + X_norm2.expand(X.size(0), X2.size(0)) + X2_norm2.t().expand(X.size(0), X2.size(0))
        return torch.exp(-K)


class stgp(nn.Module):
    def __init__(self, latlong_length_scale=2.0, elevation_length_scale=1.0, time_length_scale=0.5,
                 noise_variance=0.1, signal_variance=1.0):
        super().__init__()
        self.log_noise_variance = nn.Parameter(torch.log(torch.tensor(noise_variance)))
        self.log_signal_variance = nn.Parameter(torch.log(torch.tensor(signal_variance)))
        self.latlong_kernel = SE_kernel(latlong_length_scale)
        self.elevation_kernel = SE_kernel(elevation_length_scale)
        self.temporal_kernel = SE_kernel(time_length_scale)

    def negative_log_likelihood(self, space_coordinates, time_coordinates, stData):
        latlong_K = self.latlong_kernel(space_coordinates[:, 0:2], space_coordinates[:, 0:2])
        elevation_K = self.elevation_kernel(space_coordinates[:, 2:3], space_coordinates[:, 2:3])
        spatial_K = latlong_K * elevation_K + torch.eye(latlong_K.size(0)) * JITTER
        temporal_K = self.temporal_kernel(time_coordinates, time_coordinates) + torch.eye(time_coordinates.size(0)) * JITTER

        eigen_value_s, eigen_vector_s = torch.linalg.eigh(spatial_K, UPLO="L")
        eigen_value_t, eigen_vector_t = torch.linalg.eigh(temporal_K, UPLO="L")
        eigen_vector_st = kronecker(eigen_vector_t, eigen_vector_s)
        eigen_value_st = kronecker(eigen_value_t.view(-1, 1), eigen_value_s.view(-1, 1)).view(-1)
        inverse = 1.0 / (eigen_value_st + torch.exp(self.log_noise_variance))
        sigma_inverse = eigen_vector_st @ inverse.diag_embed() @ eigen_vector_st.transpose(-2, -1)
        self.alpha = sigma_inverse @ stData.transpose(-2, -1).reshape(-1, 1)

        nll = 0.5 * (eigen_value_st + torch.exp(self.log_noise_variance)).log().sum()
        nll += 0.5 * (stData.transpose(-2, -1).reshape(1, -1) @ self.alpha).sum()
        return nll


def train_stgp(model, train_space_coordinates, train_time_coordinates, train_stData, lr=0.1, epochs=3):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for i in range(epochs):
        optimizer.zero_grad()
        loss = model.negative_log_likelihood(train_space_coordinates, train_time_coordinates, train_stData)
        loss.backward()
        optimizer.step()
        print(f"Epoch: {i}, Loss: {loss.item():.4f}")


torch.manual_seed(0)
space = torch.rand(5, 3) * 4
time = torch.linspace(0, 1, 4).view(-1, 1)
pm25 = torch.randn(5, 4)
model = stgp()
train_stgp(model, space, time, pm25)
