"""Per-rank memory of one training step under TorchRec's DistributedModelParallel, part by part (numpy only).

What DMP, fbgemm and the optimizers hold between steps, and what one step allocates and frees on top of it, replayed
in the order TorchRec 1.8.0 and fbgemm 1.8.0 run a step; the peak is the largest running total (docs/estimator.md).
"""

from __future__ import annotations


import numpy as np

from engine.capacity import ddr_cap_of, hbm_cap_of, usable_ddr_of, usable_hbm_of
from engine.fleet import per_rank
from engine.errors import human_bytes
from engine.tiers import is_offload
from engine.memory_parts import (
    A2A, CACHE, GRAD, ID_BYTES, INPUT, OPTIMIZER, OUTPUT, OUTPUT_BYTES, OUTPUT_GRAD, PARTS, STEP_BYTES, WEIGHTS, Group,
    Timeline, cache_bytes, dense_step_temp, feature_load, fused_state,
)
from engine.types import (
    ComputeKernel,
    Config,
    Device,
    MemoryParts,
    Optimizer,
    PoolingType,
    RankStats,
    ShardingType,
    TablePlan,
    Topology,
)

class StepMemory:
    """Add every table's pieces (ranks, rows, cols), then `parts()`: one MemoryParts per rank."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        topo = cfg.topology
        self.w = topo.world_size
        self.cpu = topo.compute_device is Device.CPU
        self.index = {t.name: i for i, t in enumerate(cfg.tables)}
        self.first_feature = np.cumsum([0] + [len(t.feature_names) for t in cfg.tables])
        self.bags, self.ids = {}, {}
        for t in cfg.tables:
            self.bags[t.name], self.ids[t.name] = feature_load(cfg, t.name)
        self.stride = max((max(b) for b in self.bags.values()), default=1)
        self.held = {p: np.zeros(self.w) for p in (WEIGHTS, OPTIMIZER, CACHE, GRAD)}
        self.ddr_held = np.zeros(self.w)
        self.ddr_weights = np.zeros(self.w)  # of ddr_held, the weights
        self.dp_params: list[tuple[np.ndarray, float, float]] = []  # (ranks, weight bytes, rows x dtype bytes)
        self.groups: dict[ShardingType, Group] = {}
        self.mean_divisor = False  # TorchRec divides row-split mean-pooled outputs after the all-to-all

    def _group(self, st: ShardingType, table: int) -> Group:
        if st not in self.groups:
            z = np.zeros(self.w)
            self.groups[st] = Group(st, table, z.copy(), z.copy(), z.copy())
        return self.groups[st]

    def add(self, name: str, tp: TablePlan, ranks: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> None:
        t = self.cfg.table(name)
        i = self.index[name]
        st, kernel = tp.sharding_type, tp.compute_kernel
        nf, ids, w, s = len(t.feature_names), self.ids[name], self.w, self.stride
        g = self._group(st, i)
        dtype_bytes = t.data_type.bytes
        weights = np.ceil(rows * cols * dtype_bytes)
        if st is ShardingType.DATA_PARALLEL:
            self._add_dp(t.num_embeddings, t.embedding_dim, dtype_bytes, ranks, weights)
            np.add.at(g.cols, ranks, t.embedding_dim * nf)
            g.out_cols += t.embedding_dim * nf
            g.local_ids += ids
            g.entries += nf
            g.order.append((0, i, 0, self.first_feature[i], nf))
            return
        state = fused_state(self.cfg.topology.optimizer, rows, cols)
        if is_offload(kernel):  # the backing store (SSD, or a virtual table) is not memory: the HBM cache is
            np.add.at(self.held[CACHE], ranks, cache_bytes(self.cfg, name, tp, rows, weights))
        else:
            np.add.at(self.held[WEIGHTS], ranks, weights)
            np.add.at(self.held[OPTIMIZER], ranks, state)
        if kernel.weights_in_ddr and not self.cpu:
            np.add.at(self.ddr_held, ranks, weights + state)
            np.add.at(self.ddr_weights, ranks, weights)
        if kernel is ComputeKernel.FUSED_UVM_CACHING and not self.cpu:
            np.add.at(self.held[CACHE], ranks, cache_bytes(self.cfg, name, tp, rows, weights))
        held = rows * cols > 0
        np.add.at(g.cols, ranks, cols * nf * held)
        if st.splits_rows or st is ShardingType.GRID_SHARD:  # grid_shard: each column piece a table_row_wise one
            # TorchRec 1.8 divides mean-pooled row splits after the output dist for row_wise and table_row_wise
            # only (ShardedEmbeddingBagCollection._pooling_type_to_rs_features): grid_shard has no such callback
            self.mean_divisor = self.mean_divisor or (t.pooling is PoolingType.MEAN and st.splits_rows)
            share = rows / max(t.num_embeddings, 1)
            np.add.at(g.ids_in, ranks, w * ids * share * held)
            np.add.at(g.bags_in, ranks, w * s * nf * held)
            lw = self.cfg.topology.local_world_size
            pieces = len(ranks) // lw if st is ShardingType.GRID_SHARD else 1
            g.out_cols += t.embedding_dim * nf
            g.local_ids += ids * pieces
            g.entries += nf * pieces
            for j in range(pieces):
                host = ranks[j * lw] // lw if st.rows_in_host else 0
                g.order.append((host, i, j, self.first_feature[i], nf))
            return
        np.add.at(g.ids_in, ranks, w * ids * held)
        np.add.at(g.bags_in, ranks, w * s * nf * held)
        g.out_cols += float((cols * nf).sum())
        g.local_ids += ids * len(ranks)
        g.entries += nf * len(ranks)
        g.order += [(int(r), i, j, self.first_feature[i], nf) for j, r in enumerate(ranks)]

    def _add_dp(self, rows: int, dim: int, dtype_bytes: float, ranks: np.ndarray, weights: np.ndarray) -> None:
        """A data-parallel replica on each rank: weights, the torch optimizer's state and DDP's gradient bucket."""
        np.add.at(self.held[WEIGHTS], ranks, weights)
        np.add.at(self.held[GRAD], ranks, weights)  # DDP keeps its bucket (gradient_as_bucket_view=True)
        opt = self.cfg.topology.optimizer
        row_bytes = rows * dtype_bytes
        state = {Optimizer.SGD: 0.0, Optimizer.ADAGRAD: weights[0] + STEP_BYTES,
                 Optimizer.ROWWISE_ADAGRAD: row_bytes + STEP_BYTES, Optimizer.ADAM: 2 * weights[0] + STEP_BYTES}[opt]
        np.add.at(self.held[OPTIMIZER], ranks, state)
        self.dp_params.append((ranks, float(weights[0]), float(np.ceil(row_bytes))))

    # ---- the step, replayed -------------------------------------------------------------------------------

    def _ordered(self) -> list[Group]:
        return sorted(self.groups.values(), key=lambda g: g.first_table)

    def _permutes_input(self, groups: list[Group]) -> bool:
        """TorchRec permutes the input KJT unless its features, group after group, are already in order."""
        n_features = int(self.first_feature[-1])
        if sum(g.entries for g in groups) != n_features:  # a column split repeats its table's features
            return True
        order = [f for g in groups for (_, _, _, first, nf) in sorted(g.order) for f in range(first, first + nf)]
        return order != list(range(n_features))

    def _kept(self, g: Group) -> np.ndarray:
        """The ids and offsets fbgemm's kernel keeps from its last forward (TBE._indices, TBE._offsets)."""
        return (g.ids_in + g.bags_in + (g.cols > 0)) * ID_BYTES

    def _input_dist(self, tl: Timeline, groups: list[Group]) -> float:
        """Permute the batch into the groups' feature order, bucketize row splits, receive every group's ids and
        lengths, recat them; the buffers go once all groups are done. Returns the permuted ids' bytes, which
        data-parallel kernels keep until their backward (they read views of them)."""
        w, s = self.w, self.stride
        permuted = 0.0
        if self._permutes_input(groups):
            entries = sum(g.entries for g in groups)
            permuted = sum(g.local_ids for g in groups) * ID_BYTES
            tl.alloc(A2A, permuted + entries * s * ID_BYTES)
        kjt_offsets = self._mean_divisor(tl, groups, bool(permuted)) if self.mean_divisor else 0.0
        model_parallel = [g for g in groups if g.kind != "dp"]
        bucketized = sum((g.local_ids + w * s * g.entries) * ID_BYTES for g in model_parallel if g.kind == "rs")
        tl.alloc(A2A, bucketized)  # block_bucketize_sparse_features: ids and per-bucket lengths
        raw = [(g.ids_in + g.bags_in) * ID_BYTES for g in model_parallel]
        for r in raw:
            tl.alloc(A2A, r)  # every group's receive buffers are allocated before any is recat
        for g, r in zip(model_parallel, raw):
            tl.alloc(INPUT, r)  # recat: the ids and lengths the kernel reads
            offsets = (g.bags_in + (g.cols > 0)) * ID_BYTES  # inside permute_2D_sparse_data
            tl.alloc(INPUT, offsets)
            tl.free(INPUT, offsets)
        tl.free(A2A, sum(raw, np.zeros(w)) + bucketized)
        tl.free(INPUT, kjt_offsets)
        if permuted:
            tl.free(A2A, sum(g.entries for g in groups) * s * ID_BYTES)
            if not any(g.kind == "dp" for g in groups):
                tl.free(A2A, permuted)
        return permuted if any(g.kind == "dp" for g in groups) else 0.0

    def _mean_divisor(self, tl: Timeline, groups: list[Group], permuted: bool) -> float:
        """TorchRec's mean-pooling callback (a row split of a mean-pooled table: pieces return sums): per sample
        and output column the number of ids, made from the lengths as int64, kept as fp32 for the division and
        its backward. Returns the bytes of the permuted batch's offsets it computed (freed with the input dist)."""
        s, n_features = self.stride, int(self.first_feature[-1])
        entries = sum(g.entries for g in groups)
        columns = s * sum(g.out_cols for g in groups)
        offsets = (entries * s + 1) * ID_BYTES if permuted else 0.0
        tl.alloc(INPUT, offsets)
        lengths = entries * s * ID_BYTES
        tl.alloc(OUTPUT, lengths)  # lengths.clone()
        if entries != n_features:  # one row per output key
            tl.alloc(OUTPUT, n_features * s * ID_BYTES)
            tl.free(OUTPUT, lengths)
            lengths = n_features * s * ID_BYTES
        tl.alloc(OUTPUT, columns * ID_BYTES)  # repeat_interleave over each key's columns, int64
        tl.alloc(OUTPUT, n_features * s * ID_BYTES)  # the transposed lengths, made contiguous
        tl.free(OUTPUT, n_features * s * ID_BYTES)
        tl.alloc(OUTPUT, 2 * columns * OUTPUT_BYTES)  # as fp32, then + eps: the divisor
        tl.free(OUTPUT, columns * OUTPUT_BYTES + columns * ID_BYTES + lengths)
        return offsets

    def _lookups(self, tl: Timeline, groups: list[Group]) -> dict[ShardingType, np.ndarray]:
        """Each group's kernel and output distribution, in order; returns what each group's wait frees: its
        receive buffer and the send buffers an asynchronous collective holds until it completes."""
        w, s = self.w, self.stride
        pending = {}
        for g in groups:
            lookup = (w * s if g.kind != "dp" else s) * g.cols * OUTPUT_BYTES
            if g.kind == "dp":
                tl.alloc(INPUT, (s * g.entries + 1) * ID_BYTES)  # offsets, kept for the dense backward
                tl.alloc(OUTPUT, lookup)
                continue
            tl.alloc(INPUT, (g.bags_in + 1) * (g.cols > 0) * ID_BYTES)  # the kernel's offsets
            tl.free(INPUT, self._kept(g))  # last step's ids and offsets, replaced
            tl.alloc(OUTPUT, lookup)
            mine = s * g.out_cols * OUTPUT_BYTES
            if g.kind == "a2a":
                tl.alloc(A2A, mine + lookup)  # All2All_Pooled_Req: receive buffer and the registered copy it sends
                tl.free(OUTPUT, lookup)
                pending[g.st] = mine + lookup
            else:
                tl.alloc(OUTPUT, mine)  # reduce-scatter output
                sent = lookup if self.cpu else 0.0  # gloo's _reduce_scatter_base clones its input
                tl.alloc(A2A, sent)
                tl.free(OUTPUT, lookup)
                tl.alloc(A2A, lookup)  # the input, held by the collective until it completes
                pending[g.st] = sent + lookup
        for g in groups:
            if g.kind != "dp":
                tl.free(INPUT, g.bags_in * ID_BYTES)  # the lookups' KJTs; kernels keep their ids and offsets
        return pending

    def _forward(self, tl: Timeline, groups: list[Group]) -> float:
        """Input distribution, lookups, the waits and the KeyedTensor the loss reads (freed with the loss)."""
        s = self.stride
        permuted = self._input_dist(tl, groups)
        pending = self._lookups(tl, groups)
        for g in groups:
            if g.kind == "dp":
                continue
            tl.free(A2A, pending[g.st])
            if g.kind == "a2a":
                tl.alloc(OUTPUT, s * g.out_cols * OUTPUT_BYTES)  # All2All_Pooled_Wait's torch.cat
        outs = sum(s * g.out_cols * OUTPUT_BYTES for g in groups)
        if len(groups) > 1:
            tl.alloc(OUTPUT, outs)  # construct_output_kt's torch.cat
            tl.free(OUTPUT, outs)  # the groups' outputs
        if self.mean_divisor:
            tl.alloc(OUTPUT, outs)  # _apply_mean_pooling: values / divisor
            tl.free(OUTPUT, outs)
        tl.free(OUTPUT, outs)  # the loss keeps no output
        return permuted

    def _backward(self, tl: Timeline, groups: list[Group], permuted: float) -> None:
        """Output gradients go back through every group's collective (last group first; autograd issues them
        all before the kernels' backward), then the data-parallel kernel's dense gradient; then all is freed."""
        w, s = self.w, self.stride
        held = np.zeros(w)
        if self.mean_divisor:  # the division's backward: a real gradient of all outputs replaces the divisor
            held = held + s * sum(g.out_cols for g in groups) * OUTPUT_BYTES
            tl.alloc(OUTPUT_GRAD, held)
            tl.free(OUTPUT, held)
        mean_grad = held.copy()
        for g in reversed(groups):
            grad = s * g.out_cols * OUTPUT_BYTES
            if g.kind == "a2a":
                pieces = grad if int((g.cols > 0).sum()) > 1 else 0.0
                tl.alloc(OUTPUT_GRAD, grad + pieces)  # grad_output.contiguous() and its split by rank
                tl.alloc(OUTPUT_GRAD, grad)  # _recat_pooled_embedding_grad_out's cat: what is sent
                tl.free(OUTPUT_GRAD, grad + pieces)
                tl.alloc(A2A, w * s * g.cols * OUTPUT_BYTES)  # what this rank's kernel receives
                held = held + w * s * g.cols * OUTPUT_BYTES
                tl.free(OUTPUT_GRAD, grad)
            elif g.kind == "rs":  # grid_shard gathers its pieces' columns only (measured: docs/estimator.md, 9)
                gathered = w * s * (g.cols if g.st is ShardingType.GRID_SHARD else g.out_cols) * OUTPUT_BYTES
                tl.alloc(A2A, gathered)  # all-gather output: every rank's gradients of this group
                tl.alloc(OUTPUT_GRAD, grad)  # grad_output.contiguous()
                if self.cpu:
                    tl.alloc(A2A, gathered)  # gloo's _allgather_base gathers into a flat buffer first
                    tl.free(A2A, gathered)
                tl.free(OUTPUT_GRAD, grad)
                held = held + gathered
        if any(g.kind == "dp" for g in groups):
            tl.alloc(GRAD, self.dp_dense)  # the dense kernel's gradient of its whole tables ...
            tl.free(GRAD, self.dp_dense)  # ... copied into DDP's bucket
            dp = next(g for g in groups if g.kind == "dp")
            tl.free(INPUT, (s * dp.entries + 1) * ID_BYTES)
            tl.free(A2A, permuted)
        tl.free(A2A, held - mean_grad)
        tl.free(OUTPUT_GRAD, mean_grad)

    @property
    def dp_dense(self) -> np.ndarray:
        return self.held[GRAD]

    def _optimizer_step(self, tl: Timeline) -> None:
        """The dense optimizer of data-parallel tables: its temporaries (fused optimizers run in backward)."""
        tl.alloc(OPTIMIZER, dense_step_temp(self.cfg.topology.optimizer, self.dp_params, self.w, self.cpu))
        tl.free(OPTIMIZER, dense_step_temp(self.cfg.topology.optimizer, self.dp_params, self.w, self.cpu))

    def held_parts(self) -> dict[str, np.ndarray]:
        """Per rank, what stays between steps by part: weights, optimizer state, data-parallel gradient buckets,
        the UVM cache, and (as input_bytes) the ids and offsets each kernel keeps from its last forward."""
        kept = sum((self._kept(g) for g in self.groups.values() if g.kind != "dp"), np.zeros(self.w))
        return {**self.held, INPUT: kept}

    def held_by_rank(self) -> list[dict[str, int]]:
        held = self.held_parts()
        return [{p: int(np.ceil(v[r])) for p, v in held.items()} for r in range(self.w)]

    def parts(self) -> tuple[MemoryParts, ...]:
        groups = self._ordered()
        tl = Timeline(self.w)
        for part, held in self.held_parts().items():
            tl.alloc(part, held)
        held_total = tl.total.copy()
        n_features = int(self.first_feature[-1])
        tl.alloc(INPUT, (sum(self.ids.values()) + 2 * n_features * self.stride + 1) * ID_BYTES)  # the batch KJT
        permuted = self._forward(tl, groups)
        self._backward(tl, groups, permuted)
        self._optimizer_step(tl)
        return self._rank_parts(tl, held_total)

    def _rank_parts(self, tl: Timeline, held: np.ndarray) -> tuple[MemoryParts, ...]:
        topo = self.cfg.topology
        values = {p: np.ceil(tl.at_peak[p]).astype(np.int64) for p in PARTS}
        peak = sum(values.values())
        ddr = peak if self.cpu else np.ceil(self.ddr_held).astype(np.int64)
        cap_of, usable_of = (ddr_cap_of, usable_ddr_of) if self.cpu else (hbm_cap_of, usable_hbm_of)
        reserved = [cap_of(topo, r) - usable_of(topo, r) for r in range(self.w)]
        columns = {**{p: v.tolist() for p, v in values.items()}, "held_bytes": np.ceil(held).astype(np.int64).tolist(),
                   "peak_bytes": peak.tolist(), "peak_hbm_bytes": (peak - ddr).tolist(), "peak_ddr_bytes": ddr.tolist(),
                   "ddr_weights_bytes": np.ceil(self.ddr_weights).astype(np.int64).tolist()}
        names = list(columns)
        return tuple(MemoryParts(**dict(zip(names, row)), reserved_bytes=int(kept))
                     for row, kept in zip(zip(*columns.values()), reserved))


OUT_OF_MEMORY = "out of memory at the step's peak"  # how a plan's note starts when a rank's step outgrows its device


def over_memory(stats: tuple[RankStats, ...], topo: Topology) -> list[str]:
    """Notes for ranks whose estimated step peak exceeds the memory the device has (HBM on GPUs, the rank's DDR on
    CPUs). The planner places tables by what they store, as TorchRec's planner does (with the reservation kept
    for the dense model); the step's transient parts (all-to-all buffers, outputs and their gradients) come on top,
    and at large world sizes they can outgrow the reservation."""
    cpu = topo.compute_device is Device.CPU
    kinds = [("DDR", ddr_cap_of, lambda m: m.peak_bytes)] if cpu else [
        ("HBM", hbm_cap_of, lambda m: m.peak_hbm_bytes), ("DDR", ddr_cap_of, lambda m: m.peak_ddr_bytes)]
    notes = []
    for what, cap_of, peak_of in kinds:
        rows = [r for r in stats if r.memory is not None and peak_of(r.memory) > cap_of(topo, r.rank)]
        if not rows:
            continue
        r = max(rows, key=lambda x: (peak_of(x.memory) - cap_of(topo, x.rank), peak_of(x.memory)))
        peak, limit = peak_of(r.memory), cap_of(topo, r.rank)
        device = "the device" if not per_rank(topo) else f"rank {r.rank}'s own device"
        notes.append(
            OUT_OF_MEMORY + f" on {len(rows)} of {topo.world_size} ranks: rank {r.rank} peaks at "
            f"{human_bytes(peak)} of {what} where {device} has {human_bytes(limit)} (all-to-all buffers "
            f"{human_bytes(r.memory.a2a_bytes)}, output gradients {human_bytes(r.memory.output_grad_bytes)}); "
            "the plan fits what the tables store, not the step. What would help: a smaller batch size, more "
            "memory per rank, or fewer ranks (the all-to-all buffers grow with world size x batch)")
    return notes
