"""Self-test copy of FSDP104: the optimizer is built before sharding and holds parameters that no longer
train. fsdplint's fix moves it after the sharding calls; the tests also swap in broken fixes."""
import torch
import torch.distributed as dist
from fixture_support import ToyModel, batch, loss_fn, report, setup, snapshot
from torch.distributed.fsdp import fully_shard

device, mesh = setup()
model = ToyModel().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
before = snapshot(model.named_parameters())
losses = []
for step in range(4):
    x, y = batch(step, device)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
report(model.named_parameters(), losses, before)
dist.destroy_process_group()
