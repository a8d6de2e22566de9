"""What bench.replan's growth cases show (issue 28 item 15), written under its table in bench/results/replan.md.
The figures quoted are those of the table and of the worked cases named (estimates: the same on any machine)."""

FINDINGS = """## Grown tables that must move: is 20% reachable? (issue 28 item 15)

**criteo-1tb-8, the 3 largest grown: no, not at a step within 1.05x of the plan from scratch.** cat_0, cat_9 and
cat_19 (40M rows x 128, fp32, SGD: 19.07 GiB each) grow to 80M rows. The earlier plan cut each into two 64-column
pieces of 9.54 GiB, two of them on each of ranks 3, 4 and 5, beside a 2.38 GiB row_wise piece of cat_20 (and cat_10,
1.46 GiB, on rank 5); a rank's usable HBM is 27.2 GiB (32 GiB less the 15% reservation).

1. *Which layouts keep old rows in place.* DMP 1.8 runs a table's pieces either with all its rows (table_wise,
   column_wise, table_column_wise) or cut by rows in even blocks of ceil(rows / ranks), block i on the i-th rank of
   its scope (row_wise over all ranks, table_row_wise and grid_shard's pieces over one host's ranks):
   `RwSparseFeaturesDist` buckets ids that way whatever the shards say (uneven cuts are pooled wrongly,
   docs/estimator.md, *Mixed fleets*). "Old rows stay, only the new rows go elsewhere" would need a row cut at the
   old row count, which DMP 1.8 does not run. A piece of the grown table that keeps b bytes of its earlier rows on
   a rank therefore takes at least 2 x b there: with all rows, its new rows come with the old; with an even block,
   the block doubles and a rank's new block [2rB, 2rB + 2B) holds at most the B old rows it had (rank 0 only). One
   exception, on more than one host: a table_row_wise table on one host of L ranks can become row_wise over 2L
   ranks with the very same blocks on the same ranks (all its old rows stay, the new ones go to the other host).
   `keep_floor` counts such tables as keepable; Criteo on 8 ranks is one host.
2. *The floor.* So a rank holding O bytes of grown tables, the rest of its HBM taken by R, keeps at most
   (27.2 GiB - R) / 2 of them: ranks 3, 4 and 5 must send at least 42.4% of what the plan from scratch moves
   (the floor column). Moving other tables off them to make room moves at least as many bytes as it frees.
3. *Kernels with the weights in host DDR.* fused_uvm and fused_uvm_caching on the same rank keep every earlier row
   where it is, with 20% of it (the default cache load factor) or none in HBM. Decision: **not bytes moved**. The
   weights go from the rank's HBM to its own host's DDR over that GPU's PCIe link: nothing crosses NVLink or the
   network, no other rank waits for them, and a checkpoint shard loads on the same rank as before. (The re-plan
   still names the table under *checkpoint breaks*, since the kernel and its cache change.) But the cheapest
   such piece of the grown tables costs 0.525, 0.780 and 0.962 ms (cat_0's: column_wise 4 x 32 with
   fused_uvm_caching) against a limit of 1.05 x 0.248 = 0.261 ms, and a rank is at least as slow as any piece on
   it (`engine.replan_ddr_piece_ms`). So no plan within 1.05x keeps a grown table that way. `keep_floor` counts
   the HBM of every table whose cheapest host-DDR piece fits under the limit as free (on Criteo eleven tables of
   at most 39,060 rows, 0.2596 ms: a few MiB). The trade-off table above has the figures: at most 20% of the
   bytes costs 3.35x the step.

**How close the re-plan gets: 58.2% at 1.027x, the least any column layout of the engine's widths moves.** The
width search cuts a dim of 128 into 64 or 32 columns (`engine/widths.py`, at least 32). A 32-column piece of a grown
table takes 9.54 GiB and keeps 4.77 GiB of earlier bytes; with about 24.8 GiB free, ranks 3, 4 and 5 hold two such
pieces each, keep 9.54 of their 19.07 GiB and send 9.54 GiB each: 28.6 GiB, 58.2% of the 49.2 GiB the plan from
scratch moves, exactly what the re-plan moves. Below that, tried by hand: 16-column pieces (`min_partition` 16 on
the three tables) would let a rank keep five 16-column pieces (11.9 GiB, 43.6% moved by count), but they make the
plan from scratch itself 1.15x slower (0.284 ms: narrow pieces pay the quarter-block penalty and read their ids
once more per piece), and the re-plan with them moved 72% at 1.15x; one grown table cut
row_wise (4.77 GiB pieces on every rank) gave 56.7% at 1.083x at best. Bytes against speed, then: 58.2% at
1.03x, 56.7% at 1.08x, 42.8% at 2.74x and 19.8% at 3.35x (host-DDR kernels, the trade-off table).

**criteo-1tb-16 (two hosts), the 3 largest grown: 12.2% at 1.020x, target met** (before this change: 47.6% at
1.044x). cat_0 and cat_19 fit where they were and stay; cat_9, table_wise on rank 13, is re-split into four
32-column pieces, two of which stay on rank 13: 9.54 GiB moves, the least a column layout allows there.

**What the re-plan does now** (`engine/replan/`): beside keeping every table that fits and placing the grown ones
last, (a) a grown table goes to the candidate that moves the fewest bytes of those the ranks could still carry once
small tables make way (`place._repairable`), avoiding ranks that other grown tables held, and the slowest rank is
then bought back with cheap moves first (byte budgets growing 4x at a time); (b) the plan from scratch, relabelled
rank for rank within each host so that most bytes stay where they were (an exact assignment, `align.py`: ranks of
a host are interchangeable for freely placed shards), with tables then pulled back towards their earlier ranks,
alone or in exchange for a one-shard table on their home rank, while the slowest rank stays within the target
(`place.pull_home`). Without a byte limit the attempt that moves fewest bytes within 1.05x of
the plan from scratch wins, and when none comes within 1.05x the plan from scratch itself does (it moved 24.9% at
4.59x before on the 1e8-row 8-rank case; now 51.6% at 1.029x). Under `--max-move-bytes`, grown tables may also take
a host-DDR kernel on their rank, the fastest plan within the limit (the trade-off table), and a refusal names the
least limit that works.

**Weak still:** where tables already live in host DDR (the 1e8-row cases) the re-plan keeps or relabels the kernel
mix of one of its starting plans; it does not re-choose which tables go to DDR around the kept ones, so more than half
the bytes move there. The floor says nothing about those cases (their host-DDR pieces fit under the limit).
"""
