# https://github.com/nikhilbarhate99/PPO-PyTorch/issues/18
"""PPO as in PPO-PyTorch: policy_old acts and the memory keeps each action's
log-prob; update() stacks them into old_logprobs and then optimizes the policy for
K epochs on the same rollout. The repository detaches old_logprobs (the issue
discusses that detach); without it the stacked log-probs carry policy_old's graph,
and the second epoch backwards through the graph the first epoch freed."""
import torch
import torch.nn as nn
from torch.distributions import Categorical


class Memory:
    def __init__(self):
        self.actions, self.states, self.logprobs, self.rewards, self.is_terminals = [], [], [], [], []

    def clear_memory(self):
        del self.actions[:], self.states[:], self.logprobs[:], self.rewards[:], self.is_terminals[:]


class ActorCritic(nn.Module):
    def __init__(self, state_dim, action_dim, n_latent_var):
        super().__init__()
        self.action_layer = nn.Sequential(nn.Linear(state_dim, n_latent_var), nn.Tanh(),
                                          nn.Linear(n_latent_var, action_dim), nn.Softmax(dim=-1))
        self.value_layer = nn.Sequential(nn.Linear(state_dim, n_latent_var), nn.Tanh(), nn.Linear(n_latent_var, 1))

    def act(self, state, memory):
        dist = Categorical(self.action_layer(state))
        action = dist.sample()
        memory.states.append(state)
        memory.actions.append(action)
        memory.logprobs.append(dist.log_prob(action))
        return action.item()

    def evaluate(self, state, action):
        dist = Categorical(self.action_layer(state))
        return dist.log_prob(action), torch.squeeze(self.value_layer(state)), dist.entropy()


class PPO:
    def __init__(self, state_dim, action_dim, n_latent_var=16, lr=0.002, gamma=0.99, K_epochs=4, eps_clip=0.2):
        self.gamma, self.eps_clip, self.K_epochs = gamma, eps_clip, K_epochs
        self.policy = ActorCritic(state_dim, action_dim, n_latent_var)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr, betas=(0.9, 0.999))
        self.policy_old = ActorCritic(state_dim, action_dim, n_latent_var)
        self.policy_old.load_state_dict(self.policy.state_dict())
        self.MseLoss = nn.MSELoss()

    def update(self, memory):
        rewards, discounted_reward = [], 0
        for reward, is_terminal in zip(reversed(memory.rewards), reversed(memory.is_terminals)):
            if is_terminal:
                discounted_reward = 0
            discounted_reward = reward + (self.gamma * discounted_reward)
            rewards.insert(0, discounted_reward)
        rewards = torch.tensor(rewards, dtype=torch.float32)
        rewards = (rewards - rewards.mean()) / (rewards.std() + 1e-5)

        old_states = torch.stack(memory.states).detach()
        old_actions = torch.stack(memory.actions).detach()
        old_logprobs = torch.stack(memory.logprobs).detach()

        for _ in range(self.K_epochs):
            logprobs, state_values, dist_entropy = self.policy.evaluate(old_states, old_actions)
            ratios = torch.exp(logprobs - old_logprobs)
            advantages = rewards - state_values.detach()
            surr1 = ratios * advantages
            surr2 = torch.clamp(ratios, 1 - self.eps_clip, 1 + self.eps_clip) * advantages
            loss = -torch.min(surr1, surr2) + 0.5 * self.MseLoss(state_values, rewards) - 0.01 * dist_entropy
            self.optimizer.zero_grad()
            loss.mean().backward()
            self.optimizer.step()
        self.policy_old.load_state_dict(self.policy.state_dict())


torch.manual_seed(0)
state_dim, action_dim, update_timestep = 4, 2, 8
ppo, memory = PPO(state_dim, action_dim), Memory()
timestep = 0
for i_episode in range(1, 5):
    state = torch.randn(state_dim)
    for t in range(4):
        timestep += 1
        action = ppo.policy_old.act(state, memory)
        reward = 1.0 if action == int(state[0] > 0) else 0.0
        state = torch.randn(state_dim)
        memory.rewards.append(reward)
        memory.is_terminals.append(t == 3)
        if timestep % update_timestep == 0:
            ppo.update(memory)
            memory.clear_memory()
    print(f"episode {i_episode} done")
