"""Not a case: each rank says which simulated node it is on, after an all_reduce across the nodes."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
print(f"NODE {os.environ['GROUP_RANK']} RANK {os.environ['RANK']} LOCAL_RANK {os.environ['LOCAL_RANK']} "
      f"WORLD {int(total.item())} GPUS {os.environ.get('CUDA_VISIBLE_DEVICES', '-')}", flush=True)
dist.destroy_process_group()
