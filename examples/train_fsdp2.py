"""A small FSDP2 training script with the mistakes fsdplint finds. Try: fsdplint examples/"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return x + F.relu(self.proj(x))


class Transformer(nn.Module):
    def __init__(self, dim=32, n_layers=4):
        super().__init__()
        self.embed = nn.Linear(dim, dim)
        self.layers = nn.ModuleList(Block(dim) for _ in range(n_layers))
        self.head = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build_model(mesh):
    model = Transformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fully_shard(model.layers, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, optimizer


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
    model, optimizer = build_model(mesh)
    for step in range(10):
        x = torch.randn(8, 32)
        with model.no_sync():
            loss = F.mse_loss(model.forward(x), x)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.save(model.state_dict(), "checkpoint.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
