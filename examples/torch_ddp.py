"""Data-parallel PyTorch training (DistributedDataParallel), written for torchrun.

Every process holds a full copy of a small classifier; DDP all-reduces the
gradients each step, so every copy takes the same step. The script reads what
torchrun gives each process (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) and nothing else, so the same file runs
under either launcher::

    torchrun --nproc_per_node 3 examples/torch_ddp.py
    tfrun -w 3 -s 0 -- python examples/torch_ddp.py

On CPUs the processes talk through gloo; given GPUs (``tfrun -Gw 1``, or a GPU
machine under torchrun) each process trains on ``cuda:LOCAL_RANK`` with NCCL.
Without a launcher it trains alone.

The data is the 8x8 digits in examples/data (the ones scikit-learn bundles), so
nothing is downloaded (without that file, ten synthetic clusters of the same
shape); each process trains on its own shard of every epoch
(``DistributedSampler``).
Before training every process all-reduces a known tensor and prints the sum
(``all_reduce = [...]``, which must be ``WORLD_SIZE * (WORLD_SIZE + 1) / 2``
times ``[1, 2, 3, 4]``); after training each prints a digest of its weights
(``weights sha256 = ...``), the same on every process when DDP kept them in
step. Rank 0 also prints the loss over the whole data set before and after
(``initial loss = ...``, ``final loss = ...``) and the training speed
(``steps per second = ...``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SEED = 0
DIGITS = Path(__file__).resolve().parent / "data" / "digits.csv.gz"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=32, help="examples per process per step")
    parser.add_argument("--learning_rate", type=float, default=0.05)
    parser.add_argument(
        "--backend", choices=("gloo", "nccl"), help="default: nccl with GPUs, else gloo"
    )
    return parser.parse_args(argv)


def load_data() -> TensorDataset:
    """The 8x8 digits in examples/data, as the other examples read them."""
    if not DIGITS.exists():  # a GPU image with the script alone: still no download
        print("no examples/data/digits.csv.gz: training on ten synthetic clusters instead")
        generator = torch.Generator().manual_seed(SEED)
        labels = torch.arange(1797) % 10
        centres = torch.rand(10, 64, generator=generator)
        images = centres[labels] + 0.3 * torch.randn(len(labels), 64, generator=generator)
        return TensorDataset(images, labels)
    table = np.loadtxt(DIGITS, delimiter=",")
    # Pixel values in this data set range over 0..16.
    images = torch.from_numpy((table[:, :-1] / 16.0).astype(np.float32))
    return TensorDataset(images, torch.from_numpy(table[:, -1].astype(np.int64)))


def build_model(input_dim: int) -> nn.Module:
    return nn.Sequential(nn.Linear(input_dim, 64), nn.ReLU(), nn.Linear(64, 10))


def weights_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def full_loss(model: nn.Module, data: TensorDataset, device: torch.device) -> float:
    images, labels = data.tensors
    with torch.no_grad():  # the plain module: no collective, so rank 0 alone may run it
        logits = model(images.to(device))
        return float(nn.functional.cross_entropy(logits, labels.to(device)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    distributed = "RANK" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if distributed:
        # env://: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, from the launcher.
        dist.init_process_group(args.backend or ("nccl" if use_cuda else "gloo"))
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1
    backend = dist.get_backend() if distributed else "none"
    print(f"rank {rank} of {world_size}: {backend} on {device}", flush=True)

    # A collective with a known answer: rank r sends (r + 1) * [1, 2, 3, 4].
    probe = torch.arange(1, 5, dtype=torch.float32, device=device) * (rank + 1)
    if distributed:
        dist.all_reduce(probe)
    print(f"all_reduce = {[int(v) for v in probe.tolist()]}", flush=True)

    data = load_data()
    torch.manual_seed(SEED)  # DDP copies rank 0's initial weights to the others anyway
    net = build_model(data.tensors[0].shape[1]).to(device)
    model: nn.Module = net
    if distributed:
        model = DistributedDataParallel(net, device_ids=[local_rank] if use_cuda else None)
    sampler = (
        DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=SEED)
        if distributed
        else None
    )
    loader = DataLoader(
        data, batch_size=args.batch_size, sampler=sampler, shuffle=sampler is None, drop_last=True
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        print(f"initial loss = {full_loss(net, data, device)}", flush=True)

    steps = 0
    start = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        total = 0.0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images.to(device)), labels.to(device))
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            total += loss.item()
            steps += 1
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs}: loss {total / len(loader):.4f}", flush=True)
    elapsed = time.monotonic() - start

    print(f"weights sha256 = {weights_digest(net)}", flush=True)
    if rank == 0:
        print(f"final loss = {full_loss(net, data, device)}", flush=True)
        print(f"steps per second = {steps / elapsed:.2f}", flush=True)
    if distributed:
        # Every rank leaves together, once rank 0 (which hosts the store the
        # ranks met through) has its final loss: a rank that tore its
        # process group down and exited while rank 0 was still at it was once
        # seen to abort in gloo's teardown ("terminate called without an
        # active exception").
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
