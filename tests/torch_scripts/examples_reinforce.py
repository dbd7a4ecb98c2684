# pytorch/examples reinforcement_learning/reinforce.py, as written, with gym's CartPole replaced
# by a tiny synthetic environment of the same interface (4-d state, 2 actions, reward 1 per
# step while the pole stays up) written in NumPy.
from itertools import count

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical


class TinyCartPole:
    """x' = x + 0.1 v; v' = v + 0.1 (a - 0.5) * 2 - 0.05 x; done when |x| > 1 or 100 steps."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self, seed=None):
        self.state = self.rng.uniform(-0.05, 0.05, 4)
        self.t = 0
        return self.state.copy(), {}

    def step(self, action):
        x, v, th, w = self.state
        force = 1.0 if action == 1 else -1.0
        w = w + 0.2 * th + 0.05 * force
        th = th + 0.1 * w
        x, v = x + 0.02 * v, v + 0.02 * force
        self.state = np.array([x, v, th, w])
        self.t += 1
        terminated = bool(abs(th) > 0.4 or abs(x) > 2.4)
        truncated = self.t >= 100
        return self.state.copy(), 1.0, terminated, truncated, {}


gamma = 0.99
seed = 543
log_interval = 10

env = TinyCartPole(seed)
env.reset(seed=seed)
torch.manual_seed(seed)


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


policy = Policy()
optimizer = optim.Adam(policy.parameters(), lr=1e-2)
eps = np.finfo(np.float32).eps.item()


def select_action(state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = []
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]


def main():
    running_reward = 10
    lengths = []
    for i_episode in count(1):
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 10000):  # Don't infinite loop while learning
            action = select_action(state)
            state, reward, done, _, _ = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done or env.t >= 100:
                break

        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        lengths.append(t)
        finish_episode()
        if i_episode % log_interval == 0:
            print('Episode {}\tLast reward: {:.2f}\tAverage reward: {:.2f}'.format(
                  i_episode, ep_reward, running_reward))
        if running_reward > 60 or i_episode >= 150:
            print("Solved! Running reward is now {} and "
                  "the last episode runs to {} time steps!".format(running_reward, t))
            break
    return running_reward, lengths


running_reward, lengths = main()
print("CHECK first_lengths_mean", float(np.mean(lengths[:10])))
print("CHECK last_lengths_mean", float(np.mean(lengths[-10:])))
