"""A seeded sample of realistic ids for a config, to test and benchmark `python -m engine stats`.

`python -m engine.stats.generate CONFIG.json --rows N --seed S --out sample.parquet [--format parquet|csv|npz]`

Feature k of the config (in table order) is Zipf-distributed when k is even (exponent 0.8 + 0.1 * (k % 6)) and
uniform when k is odd; its mean pooling is 1, 3, 8 or 20 (by k % 4), drawn per sample from a Poisson law, with
5% + 5% * (k % 3) of the samples left empty. Ids are drawn over 1.25 x the table's rows (at most 2**62), so about
a fifth of a uniform feature's ids lie beyond num_embeddings and are folded by TorchRec. The same config, rows
and seed give the same file. `--zipf S` draws every feature from Zipf(S) instead (`--zipf 0`: every feature
uniform), keeping the poolings and empty bags.
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterator

import numpy as np

from engine import atomicfile
from engine.cliutil import one_line_errors
from engine.config import load_config
from engine.errors import EngineError, one_line
from engine.types import Config

POOLINGS = (1.0, 3.0, 8.0, 20.0)
CHUNK_ROWS = 1 << 16


def feature_ids(k: int, lengths_sum: int, domain: int, rng: np.random.Generator,
                zipf: float | None = None) -> np.ndarray:
    """`lengths_sum` ids of feature number k over [0, domain); zipf: every feature's exponent (0: uniform), else
    the module's mix."""
    if (zipf is None and k % 2) or zipf == 0:
        return rng.integers(0, domain, lengths_sum, dtype=np.int64)
    s = 0.8 + 0.1 * (k % 6) if zipf is None else zipf
    u = rng.random(lengths_sum)
    # a bounded continuous Zipf (Pareto) law by inverse transform: rank r in [1, domain] with density ~ r**-s
    ranks = ((domain ** (1.0 - s) - 1.0) * u + 1.0) ** (1.0 / (1.0 - s)) if s != 1.0 else domain ** u
    ranks = np.minimum(np.floor(ranks).astype(np.int64), domain) - 1
    return (ranks * 7919 + k * 104_729) % domain  # the hot rows spread over the table, a different set per feature


def generate(cfg: Config, rows: int, seed: int,
             zipf: float | None = None) -> Iterator[dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Chunks of {feature: (lengths, values)}; the same (config, rows, seed) give the same chunks."""
    features = [(f, t.num_embeddings) for t in cfg.tables for f in t.feature_names]
    rng = np.random.default_rng(seed)
    for row0 in range(0, rows, CHUNK_ROWS):
        n = min(CHUNK_ROWS, rows - row0)
        chunk = {}
        for k, (f, num) in enumerate(features):
            lengths = rng.poisson(POOLINGS[k % 4], n).astype(np.int64)
            lengths[rng.random(n) < 0.05 + 0.05 * (k % 3)] = 0
            domain = min(num + num // 4 + 1, 2**62)
            chunk[f] = (lengths, feature_ids(k, int(lengths.sum()), domain, rng, zipf))
        yield chunk


def to_bytes(cfg: Config, rows: int, seed: int, fmt: str, zipf: float | None = None) -> bytes:
    """The generated sample as the bytes of a Parquet, CSV or NPZ file."""
    chunks = generate(cfg, rows, seed, zipf)
    features = [f for t in cfg.tables for f in t.feature_names]
    if fmt == "csv":
        lines = [",".join(features)]
        for chunk in chunks:
            cells = []
            for f in features:
                lengths, values = chunk[f]
                bounds = np.concatenate(([0], np.cumsum(lengths)))
                text = values.astype(str)
                cells.append([" ".join(text[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
            lines.extend(",".join(row) for row in zip(*cells))
        return ("\n".join(lines) + "\n").encode("ascii")
    if fmt == "npz":
        import io

        parts: dict[str, list[np.ndarray]] = {}
        for chunk in chunks:
            for f, (lengths, values) in chunk.items():
                parts.setdefault(f"{f}.lengths", []).append(lengths)
                parts.setdefault(f"{f}.values", []).append(values)
        buf = io.BytesIO()
        np.savez(buf, **{k: np.concatenate(v) for k, v in parts.items()})
        return buf.getvalue()
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(f, pa.list_(pa.int64())) for f in features])
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema) as writer:
        for chunk in chunks:
            arrays = [pa.ListArray.from_arrays(np.concatenate(([0], np.cumsum(chunk[f][0]))).astype(np.int32),
                                               chunk[f][1]) for f in features]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
    return sink.getvalue().to_pybytes()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.stats.generate", description=__doc__.split("\n")[0])
    p.add_argument("config", metavar="CONFIG.json")
    p.add_argument("--rows", type=int, required=True, help="samples to generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, metavar="SAMPLE")
    p.add_argument("--format", choices=["parquet", "csv", "npz"], default=None,
                   help="default: from --out's suffix, else parquet")
    p.add_argument("--zipf", type=float, default=None, metavar="S",
                   help="every feature Zipf(S) (0: uniform); default: the mix the module's docstring describes")
    one_line_errors(p, "generate")
    args = p.parse_args(argv)
    try:
        if not 0 <= args.rows <= 10**9:
            raise EngineError(f"--rows must be from 0 to 1,000,000,000, got {args.rows:,}")
        if args.zipf is not None and not 0 <= args.zipf <= 5:
            raise EngineError(f"--zipf must be from 0 to 5 (0: uniform), got {args.zipf:g}")
        fmt = args.format or {".csv": "csv", ".npz": "npz"}.get(args.out[-4:].lower(), "parquet")
        atomicfile.write_bytes(args.out, to_bytes(load_config(args.config), args.rows, args.seed, fmt,
                                                    args.zipf))
    except EngineError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write --out {args.out!r}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
