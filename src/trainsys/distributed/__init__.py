"""The real engine: the course's algorithms on ``torch.distributed``, one process per worker.

The lessons simulate workers inside one process so that every byte can be counted. The scripts here run
the same algorithms for real, launched with ``torchrun --standalone --nproc_per_node=N`` (gloo on CPU,
nccl when every rank has a GPU), and :func:`trainsys.distributed.launch.run` starts them from Python
and collects rank 0's JSON result, so tests and lessons can compare the real run with the simulation.
"""
