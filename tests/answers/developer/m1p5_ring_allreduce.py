"""Mutants for Module 1, Part 5, Lesson 28: the ring all-reduce mistakes the notebook names."""

from __future__ import annotations

from trainsys.memtrain import ring_allreduce as ref

REFERENCE = "trainsys.memtrain.ring_allreduce"


def _ring(ag_offset: int = 1, divide: str = "owner", gather: str = "replace", bytes_rule: str = "chunk",
          direction: int = 1):
    """A ring all-reduce with one deliberate mistake; the defaults are the correct algorithm."""

    def wrong(worker_arrays):
        ref.ring_all_reduce_mean(worker_arrays)  # validation
        N, shape = len(worker_arrays), worker_arrays[0].shape
        buf = [a.reshape(-1).copy() for a in worker_arrays]
        n, itemsize = buf[0].size, buf[0].itemsize
        bounds = ref.ring_chunk_bounds(n, N)
        log = []
        for step in range(2 * (N - 1)):
            rs = step < N - 1
            s = step if rs else step - (N - 1)
            sends = []
            for k in range(N):
                if direction == 1:
                    chunk = (k - s) % N if rs else (k + ag_offset - s) % N
                else:  # the mirrored ring: k sends to k − 1
                    chunk = (k + s) % N if rs else (k - 1 + s) % N
                lo, hi = bounds[chunk]
                payload = buf[k][lo:hi].copy()
                if rs and divide == "twice":
                    payload /= N  # "average as you go" ...
                sends.append((k, (k + direction) % N, chunk, payload))
            for k, r, chunk, payload in sends:
                lo, hi = bounds[chunk]
                if rs or gather == "add":
                    buf[r][lo:hi] += payload
                else:
                    buf[r][lo:hi] = payload
                size = payload.nbytes if bytes_rule == "chunk" else (n // N) * itemsize
                log.append({"step": step, "phase": ref.PHASES[0] if rs else ref.PHASES[1], "sender": k,
                            "receiver": r, "chunk": chunk, "bytes": int(size)})
            if step == N - 2 and divide == "owner":
                for k in range(N):
                    lo, hi = bounds[(k + direction) % N]
                    buf[k][lo:hi] /= N
        if divide == "twice":
            buf = [b / N for b in buf]  # ... and again at the end
        return [b.reshape(shape) for b in buf], log

    return wrong


MUTANTS = {
    "ring_all_reduce_mean": [
        ("all-gather chunk index off by one (k − s instead of k + 1 − s)", _ring(ag_offset=0)),
        ("averages twice: divides by N in reduce-scatter and again at the end", _ring(divide="twice")),
        ("all-gather adds the received chunk instead of replacing it", _ring(gather="add")),
        ("logs n // N elements per message (wrong when N does not divide n)", _ring(bytes_rule="floor")),
        ("sends to worker k − 1 (the ring turned the other way)", _ring(direction=-1)),
    ],
}
