"""An FSDP1 script to migrate: the harness compares its losses with those of the migrated script."""
import torch
import torch.distributed as dist
from fixture_support import ToyModel, batch, loss_fn, report, setup, snapshot
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

device, _ = setup()
model = FSDP(ToyModel().to(device), device_id=device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
before = snapshot(model)
losses = []
for step in range(3):
    x, y = batch(step, device)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
report(model, losses, before)
dist.destroy_process_group()
