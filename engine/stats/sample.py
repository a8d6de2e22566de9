"""Reading a sample of training ids, streamed: Parquet (row groups), CSV (blocks) and NumPy .npz (chunks).

A sample has one column per feature of the config and one row per training sample; a cell is the sample's ids
for that feature (an empty list: no ids). Parquet: list<int> columns. CSV: a header of feature names, each cell
the ids separated by spaces. NPZ: `<feature>.lengths` (ids per sample) and `<feature>.values` (all ids in row
order). Every reader yields (first_row, {feature: (lengths, values)}) chunks of int64 arrays, so memory is bounded
by the chunk, whatever the file size. A bad sample raises SampleError naming the feature, the row and the fix.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np

from engine import limits as L
from engine.errors import EngineError, human_bytes

CHUNK_ROWS = 65_536
FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".npz": "npz"}
Chunk = dict[str, tuple[np.ndarray, np.ndarray]]


class SampleError(EngineError):
    """A sample file that cannot be read as ids: names the file, the feature and the row where it can."""

    def __init__(self, path: str | Path, message: str, feature: str | None = None, row: int | None = None):
        where = "".join([f" feature {feature!r}" if feature is not None else "",
                         f" row {row:,}" if row is not None else ""])
        super().__init__(f"sample {Path(path).name!r}{where}: {message}")


def sample_format(path: str | Path) -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise SampleError(path, f"unknown format {Path(path).suffix!r}; name it .parquet, .csv or .npz")
    return fmt


def check_size(path: str | Path) -> int:
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise SampleError(path, "does not exist") from None
    except OSError as e:
        raise SampleError(path, f"cannot be read: {e.strerror or e}") from None
    if size > L.MAX_SAMPLE_BYTES:
        raise SampleError(path, f"is {human_bytes(size)}; at most {human_bytes(L.MAX_SAMPLE_BYTES)} are read "
                          "(engine/limits.py MAX_SAMPLE_BYTES): take fewer rows")
    return size


def read_sample(path: str | Path, features: tuple[str, ...]) -> Iterator[tuple[int, Chunk]]:
    """(first row, {feature: (lengths, values)}) chunks in row order; checks every cell (SampleError)."""
    check_size(path)
    reader = {"parquet": _parquet, "csv": _csv, "npz": _npz}[sample_format(path)]
    for row0, chunk in reader(path, features):
        for f, (lengths, values) in chunk.items():
            _check_ids(path, f, row0, lengths, values)
        yield row0, chunk


def sample_rows(path: str | Path) -> int | None:
    """The sample's rows as the file tells before it is read: Parquet from its footer, NPZ from the first .lengths
    array's header, CSV by its line breaks less the header (more than the rows if a quoted cell holds a line
    break); None when the file does not tell (reading it then says what is wrong). For progress only."""
    try:
        fmt = sample_format(path)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if fmt == "npz":
            with zipfile.ZipFile(path) as z:
                name = next((n for n in z.namelist() if n.endswith(".lengths.npy")), None)
                return None if name is None else int(_NpyStream(path, "", z.open(name)).count)
        lines, last = 0, b"\n"
        with open(path, "rb") as f:
            while block := f.read(1 << 24):
                lines += block.count(b"\n")
                last = block[-1:]
        return max(0, lines + (last != b"\n") - 1)
    except Exception:  # noqa: BLE001 - an unreadable file is refused by the reader, with its line
        return None


def ids_bound(path: str | Path, features: tuple[str, ...]) -> dict[str, int] | None:
    """Per feature, the most ids the file can hold, as it tells before it is read: Parquet, the values its footer
    counts per column (ids, and a slot per empty or null list); NPZ, the .values arrays' lengths. None when the file
    does not tell (CSV, or a file that does not read). Lets a replay that the budget covers skip the sampled one."""
    try:
        fmt = sample_format(path)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            out = dict.fromkeys(features, 0)
            for c in range(meta.num_columns):
                leaf = meta.row_group(0).column(c).path_in_schema if meta.num_row_groups else ""
                # a list column's one leaf is "<name>.list.element": its name is all but the last two parts
                names = [f for f in features if leaf.startswith(f + ".") and leaf[len(f) + 1:].count(".") == 1]
                if len(names) > 1:
                    return None
                for f in names:
                    out[f] = sum(int(meta.row_group(g).column(c).num_values) for g in range(meta.num_row_groups))
            return out if meta.num_row_groups and all(out.values()) else None
        if fmt == "npz":
            with zipfile.ZipFile(path) as z:
                return {f: int(_NpyStream(path, f, z.open(f"{f}.values.npy")).count) for f in features}
    except Exception:  # noqa: BLE001 - an unreadable file is refused by the reader, with its line
        return None
    return None


def fold_ids(values: np.ndarray, num_embeddings: int) -> np.ndarray:
    """Ids as the table's rows, folded as TorchRec folds ids beyond a table: id % num_embeddings (a copy only when
    some id is beyond it)."""
    if values.size and int(values.max()) >= num_embeddings:
        return values % num_embeddings
    return values


def _check_ids(path, feature: str, row0: int, lengths: np.ndarray, values: np.ndarray) -> None:
    if values.size and values.min() < 0:
        k = int(np.argmax(values < 0))
        row = row0 + int(np.searchsorted(np.cumsum(lengths), k, side="right"))
        raise SampleError(path, f"id {int(values[k])} is negative; ids are row numbers, 0 or more", feature, row)


def _columns(path, names: list[str], features: tuple[str, ...]) -> None:
    missing = [f for f in features if f not in names]
    if missing:
        extra = [n for n in names if n not in features]
        raise SampleError(path, f"has no column for feature {missing[0]!r}; the config's features are "
                          f"{', '.join(features)}" + (f" (the file has {', '.join(extra[:10])})" if extra else "")
                          + ": name one column per feature")


def _first_row(offsets: np.ndarray, flat_index: int) -> int:
    return int(np.searchsorted(offsets, flat_index, side="right")) - 1


def _list_column(path, feature: str, row0: int, col) -> tuple[np.ndarray, np.ndarray]:
    """A pyarrow list<int> column chunk as (lengths, values); nulls and non-integers are errors."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise SampleError(path, f"is a column of {arr.type}, not lists of integer ids: write list<int64>",
                          feature, row0)
    if arr.null_count:
        row = row0 + int(np.argmax(np.asarray(arr.is_null())))
        raise SampleError(path, "is null; write an empty list for a sample without ids", feature, row)
    lengths = np.asarray(pc.list_value_length(arr), dtype=np.int64)
    flat = arr.flatten()
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    if flat.null_count:
        row = row0 + _first_row(offsets, int(np.argmax(np.asarray(flat.is_null()))))
        raise SampleError(path, "holds a null id; every id is a whole number", feature, row)
    t = flat.type
    if pa.types.is_integer(t):
        values = np.asarray(flat).astype(np.int64, copy=False)
        if pa.types.is_uint64(t) and values.size and values.min() < 0:
            row = row0 + _first_row(offsets, int(np.argmax(values < 0)))
            raise SampleError(path, "holds an id above 2**63-1; ids are row numbers", feature, row)
        return lengths, values
    if pa.types.is_floating(t):
        f = np.asarray(flat, dtype=np.float64)
        bad = ~np.isfinite(f) | (f != np.floor(f)) | (np.abs(f) >= 2.0**63)
        if bad.any():
            k = int(np.argmax(bad))
            raise SampleError(path, f"holds {f[k]!r}, not a whole number; ids are integers", feature,
                              row0 + _first_row(offsets, k))
        return lengths, f.astype(np.int64)
    k = 0 if not lengths.any() else int(np.argmax(lengths > 0))
    raise SampleError(path, f"holds {t} ids, not integers: write list<int64>", feature, row0 + k)


def _parquet(path, features: tuple[str, ...]) -> Iterator[tuple[int, Chunk]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, pre_buffer=False)  # pre-buffering held ~500 MB of column chunks at 10^8 ids
        _columns(path, pf.schema_arrow.names, features)
        row0 = 0
        for batch in pf.iter_batches(batch_size=CHUNK_ROWS, columns=list(features)):
            yield row0, {f: _list_column(path, f, row0, batch.column(f)) for f in features}
            row0 += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise SampleError(path, f"is not a readable Parquet file ({_short(e)}); write it again whole") from None


def _csv(path, features: tuple[str, ...]) -> Iterator[tuple[int, Chunk]]:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        reader = pcsv.open_csv(path, read_options=pcsv.ReadOptions(block_size=1 << 22),
                               convert_options=pcsv.ConvertOptions(column_types={}, strings_can_be_null=False,
                                                                   include_columns=None))
        names = reader.schema.names
        _columns(path, names, features)
        reader = pcsv.open_csv(path, read_options=pcsv.ReadOptions(block_size=1 << 22),
                               convert_options=pcsv.ConvertOptions(
                                   column_types={n: pa.string() for n in names}, strings_can_be_null=False,
                                   include_columns=list(features)))
        row0 = 0
        for batch in reader:
            yield row0, {f: _csv_cells(path, f, row0, batch.column(f)) for f in features}
            row0 += batch.num_rows
    except pa.ArrowException as e:
        raise SampleError(path, f"is not a readable CSV file ({_short(e)}); write a header of feature names and "
                          "one row per sample") from None


def _csv_cells(path, feature: str, row0: int, col) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow as pa
    import pyarrow.compute as pc

    trimmed = pc.utf8_trim_whitespace(col)
    parts = pc.split_pattern_regex(trimmed, r"\s+")
    empty = np.asarray(pc.equal(trimmed, ""), dtype=bool)
    lengths = np.asarray(pc.list_value_length(parts), dtype=np.int64) - empty
    flat = parts.flatten()
    flat = flat.filter(pc.not_equal(flat, ""))
    try:
        values = np.asarray(pc.cast(flat, pa.int64()), dtype=np.int64)
    except pa.ArrowException:
        ok = np.asarray(pc.match_substring_regex(flat, r"^[+-]?[0-9]{1,18}$"), dtype=bool)
        k = int(np.argmax(~ok)) if not ok.all() else 0
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        raise SampleError(path, f"holds {_short(repr(flat[k].as_py()))}, not a whole number; write ids as integers "
                          "separated by spaces", feature, row0 + _first_row(offsets, k)) from None
    return lengths, values


def _npz(path, features: tuple[str, ...]) -> Iterator[tuple[int, Chunk]]:
    try:
        with zipfile.ZipFile(path) as z:
            names = [n[:-4] for n in z.namelist() if n.endswith(".npy")]
            cols = sorted({n.rsplit(".", 1)[0] for n in names if n.endswith((".lengths", ".values"))})
            _columns(path, cols, features)
            for f in features:
                for part in ("lengths", "values"):
                    if f"{f}.{part}" not in names:
                        raise SampleError(path, f"has no array {f}.{part}; write {f}.lengths and {f}.values", f)
            streams = {f: (_NpyStream(path, f, z.open(f"{f}.lengths.npy")),
                           _NpyStream(path, f, z.open(f"{f}.values.npy"))) for f in features}
            rows = {s[0].count for s in streams.values()}
            if len(rows) != 1:
                raise SampleError(path, "features have different numbers of rows ("
                                  + ", ".join(f"{f}: {s[0].count:,}" for f, s in streams.items()) + ")")
            n = rows.pop()
            for row0 in range(0, n, CHUNK_ROWS):
                chunk = {}
                for f, (ls, vs) in streams.items():
                    lengths = ls.read(min(CHUNK_ROWS, n - row0), row0)
                    if lengths.size and lengths.min() < 0:
                        raise SampleError(path, "has a negative length; lengths count ids per sample", f,
                                          row0 + int(np.argmax(lengths < 0)))
                    ends = np.cumsum(lengths)
                    if ends.size and vs.done + int(ends[-1]) > vs.count:
                        row = row0 + int(np.searchsorted(ends, vs.count - vs.done, side="right"))
                        raise SampleError(path, f"{f}.lengths ask for more ids than the {vs.count:,} in {f}.values; "
                                          "write the lengths of the values as they are", f, row)
                    chunk[f] = (lengths, vs.read(int(ends[-1]) if ends.size else 0, row0))
                yield row0, chunk
            for f, (_, vs) in streams.items():
                if vs.done != vs.count:
                    raise SampleError(path, f"{f}.values holds {vs.count:,} ids but {f}.lengths add up to "
                                      f"{vs.done:,}", f)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as e:
        raise SampleError(path, f"is not a readable .npz file ({_short(e)}); write it with numpy.savez") from None


class _NpyStream:
    """One .npy member of a zip, read in order a chunk at a time."""

    def __init__(self, path, feature: str, f):
        self.path, self.feature, self.f, self.done = path, feature, f, 0
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if len(shape) != 1 or dtype.kind not in "iu":
            raise SampleError(path, f"{getattr(f, 'name', 'array')} is {dtype} of shape {shape}, not a 1-D array of "
                              "integers", feature)
        self.dtype, self.count = dtype, shape[0]

    def read(self, n: int, row0: int) -> np.ndarray:
        if self.done + n > self.count:
            raise SampleError(self.path, f"the lengths ask for more ids than the {self.count:,} values hold",
                              self.feature, row0)
        data = self.f.read(n * self.dtype.itemsize)
        if len(data) != n * self.dtype.itemsize:
            raise SampleError(self.path, "the file ends early; write it again whole", self.feature, row0)
        self.done += n
        out = np.frombuffer(data, dtype=self.dtype)
        if self.dtype == np.uint64 and out.size and out.max() >= 2**63:
            raise SampleError(self.path, "holds an id above 2**63-1", self.feature, row0)
        return out.astype(np.int64)


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 120 else text[:117] + "..."
