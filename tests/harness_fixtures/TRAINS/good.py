"""The good script of the TRAINS self-test: it trains (the same as its "bad" one)."""
import torch
import torch.distributed as dist
from fixture_support import ToyModel, batch, loss_fn, report, setup, snapshot
from torch.distributed.fsdp import fully_shard

device, mesh = setup()
model = ToyModel().to(device)
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
before = snapshot(model.named_parameters())
losses = []
for step in range(3):
    x, y = batch(step, device)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
report(model.named_parameters(), losses, before)
dist.destroy_process_group()
