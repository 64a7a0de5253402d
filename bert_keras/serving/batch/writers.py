"""Where `predict` writes: each finished chunk of rows as a JSON-lines part in
`OUT.parts/` (a temporary file renamed into place, so a part is whole or absent), the
run's settings in `OUT.parts/run.json` (another command into the same output is an
error), and at the end OUT itself, assembled from the parts under a temporary name and
renamed: a killed run never leaves an OUT that looks complete.

OUT is `.jsonl` (a record a line), `.tsv` (a column a field, nested values as JSON),
`.npy` (an embedder's float32 vectors `[rows, H]`, in input order, with the ids in
`OUT.ids.jsonl` beside it), `.parquet` (with pyarrow: a column a field, vectors as
float32 lists, other nested values as JSON), or a folder `OUT/` (a name ending in `/`)
of an embedder's vectors in shards of `shard_rows` rows: `vectors-SSSSS-of-NNNNN.npy`,
each with its rows' ids in `ids-SSSSS-of-NNNNN.jsonl` (the shard names of Beam's
`WriteToText` and of `datasets`' `save_to_disk`); the folder is written as `OUT.tmp/`
and renamed whole.

For an OUT that is not text (`.npy`, `OUT/`, `.parquet`) a chunk's vectors go into a
float32 `.npy` part first, and its JSON part after holds `"embedding": null` in their place:
the JSON part marks the chunk finished, so a chunk killed between the two is absent and
is written again; the vectors are never turned into text and back. The vectors are
written through memory-mapped `.npy` files a chunk at a time: memory does not grow with
the rows."""

import itertools
import json
import os
import shutil
from pathlib import Path

import numpy as np

from bert_keras import run_identity

OUTPUTS = (".jsonl", ".tsv", ".npy", ".parquet", "/")
SETTINGS = "run.json"
VECTOR = "embedding"


def is_folder_output(output):
    """Whether `output` names a folder of vector shards (`OUT/`)."""
    return str(output).endswith(("/", os.sep))


def holds_vectors(output):
    """Whether `output` holds vectors alone (`.npy` or a folder of shards)."""
    return is_folder_output(output) or Path(output).suffix == ".npy"


class PartsFolder:
    """`OUT.parts/`: the finished chunks of the run whose identity (`run_identity`: its
    settings, model and inputs) is `identity`; `shard_rows`, the rows of each shard of a
    folder output. Parts of another identity are refused, naming what differs;
    `overwrite` removes them and OUT first."""

    def __init__(self, output, identity, shard_rows=100_000, overwrite=False):
        self.output, self.shard_rows, self.sharded = Path(output), shard_rows, is_folder_output(output)
        if self.output.suffix not in OUTPUTS and not self.sharded:
            raise ValueError(f"--output {output}: write {', '.join(OUTPUTS[:-1])} or a folder OUT/ (vector shards)")
        if shard_rows < 1:
            raise ValueError(f"shard_rows must be at least 1, got {shard_rows}")
        self.folder = self.output.with_name(self.output.name + ".parts")
        self.binary = holds_vectors(output) or self.output.suffix == ".parquet"
        if overwrite:
            self._remove_run()
        if self.output.exists():
            shutil.rmtree(self.folder, ignore_errors=True)  # a run killed after OUT was renamed into place
            raise FileExistsError(f"{self.output} exists (a finished run); pass --overwrite to predict it again")
        remedy = "run the same command on the same files to resume it, or pass --overwrite to start over"
        recorded = run_identity.read_record(self.folder / SETTINGS, remedy)
        if recorded is not None:
            run_identity.check(recorded, identity, str(self.folder), remedy)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)  # parts of no run: its record goes in first
            run_identity.write_record(self.folder / SETTINGS, identity)

    def _remove_run(self):
        """OUT, its parts and a temporary OUT left by a killed run."""
        temporary = self.output.with_name(self.output.name + ".tmp")
        for path in (self.output, self.folder, temporary):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    def part(self, index):
        return self.folder / f"part-{index:06d}.jsonl"

    def vector_part(self, index):
        return self.folder / f"part-{index:06d}.npy"

    def finished_chunks(self):
        """How many chunks from the first are written."""
        count = 0
        while self.part(count).exists():
            count += 1
        return count

    def write_chunk(self, index, records):
        """The chunk's records; for an OUT that is not text its vectors first, as a `.npy` part."""
        if self.binary and any(VECTOR in record for record in records):
            vectors = np.asarray([record[VECTOR] for record in records if VECTOR in record], np.float32)
            _write_atomically(self.vector_part(index), lambda stream: np.save(stream, vectors))
            records = [{**record, VECTOR: None} if VECTOR in record else record for record in records]
        _write_text(self.part(index), "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))

    def chunk(self, index, vectors=True):
        """Chunk `index`'s records as its JSON part holds them and the vectors of its `.npy`
        part (None: the records hold their vectors, have none, or `vectors` is False)."""
        with open(self.part(index), encoding="utf-8") as stream:
            records = [json.loads(line) for line in stream]
        held_apart = vectors and any(VECTOR in record and record[VECTOR] is None for record in records)
        return records, np.load(self.vector_part(index)) if held_apart else None

    def records(self, vectors=True):
        """Every finished chunk's records, each vector back in its record: a float32 row of
        its `.npy` part, or the list of floats a text part holds (`vectors=False`: not read,
        None where a `.npy` part holds it)."""
        for index in range(self.finished_chunks()):
            records, held_apart = self.chunk(index, vectors)
            rows = iter(() if held_apart is None else held_apart)
            for record in records:
                if held_apart is not None and VECTOR in record and record[VECTOR] is None:
                    record[VECTOR] = next(rows)
                yield record

    def vector_blocks(self, width):
        """Each finished chunk as a float32 array of its vectors (rows without one, in
        error: NaN) and its records without them."""
        for index in range(self.finished_chunks()):
            records, held_apart = self.chunk(index)
            has = np.array([VECTOR in record for record in records], bool)
            if held_apart is None:
                held_apart = np.asarray([record[VECTOR] for record in records if VECTOR in record], np.float32)
            block = np.full((len(records), width), np.nan, np.float32)
            block[has] = held_apart.reshape(-1, width)
            yield block, [{key: value for key, value in record.items() if key != VECTOR} for record in records]

    def vector_width(self):
        """The width of the first vector in the parts."""
        for index in range(self.finished_chunks()):
            records, held_apart = self.chunk(index)
            if held_apart is not None:
                return held_apart.shape[1]
            for record in records:
                if VECTOR in record:
                    return len(record[VECTOR])
        raise ValueError(f"{self.output}: no row has a vector (every row is in error: see {self.folder})")

    def count(self):
        """The records in the parts (their lines, not parsed)."""
        total = 0
        for index in range(self.finished_chunks()):
            with open(self.part(index), "rb") as stream:
                total += sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 20), b""))
        return total

    def assemble(self, records=None):
        """Writes OUT from the parts' records, or from those that `records()` yields
        (under a temporary name, then renamed) and removes the parts; returns the rows written."""
        temporary = self.output.with_name(self.output.name + ".tmp")
        if holds_vectors(self.output) or self.sharded:
            write = _write_shards if self.sharded else _write_npy
            count = write(self, temporary)
        elif self.output.suffix == ".jsonl" and records is None:
            count = _copy_parts(self, temporary)
        else:
            writers = {".jsonl": _write_jsonl, ".tsv": _write_tsv, ".parquet": _write_parquet}
            count = writers[self.output.suffix](records or self.records, self.output, temporary)
        os.replace(temporary, self.output)
        shutil.rmtree(self.folder)
        return count


def _write_atomically(path, write):
    """`write(stream)` into a temporary file beside `path`, renamed to `path` once on disk."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as stream:
        write(stream)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(temporary, path)


def _write_text(path, text):
    _write_atomically(path, lambda stream: stream.write(text.encode("utf-8")))


def _copy_parts(parts, path):
    """The parts' lines as they are: each part is a record a line in this very form."""
    count = 0
    with open(path, "wb") as stream:
        for index in range(parts.finished_chunks()):
            with open(parts.part(index), "rb") as part:
                for line in part:
                    stream.write(line)
                    count += 1
    return count


def _write_jsonl(records, output, path):
    count = 0
    with open(path, "w", encoding="utf-8") as stream:
        for record in records():
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def _field(value):
    if isinstance(value, str):
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _columns(records):
    """The fields of every record, in order of first appearance, each with its first value."""
    columns = {}
    for record in records():
        for key, value in record.items():
            if columns.get(key) is None:
                columns[key] = value
    return columns


def _write_tsv(records, output, path):
    columns = _columns(records)
    count = 0
    with open(path, "w", encoding="utf-8") as stream:
        stream.write("\t".join(columns) + "\n")
        for record in records():
            stream.write("\t".join(_field(record.get(column)) for column in columns) + "\n")
            count += 1
    return count


class _Rows:
    """The rows of `blocks` (`PartsFolder.vector_blocks`) taken a number at a time, across
    the blocks' edges."""

    def __init__(self, blocks):
        self.blocks, self.block, self.records = blocks, None, []

    def take(self, count):
        """`count` rows as (vectors, records) pieces."""
        while count > 0:
            if not self.records:
                self.block, self.records = next(self.blocks)
                continue
            piece = self.block[:count], self.records[:count]
            self.block, self.records = self.block[count:], self.records[count:]
            count -= len(piece[1])
            yield piece


def _write_vectors(rows, count, width, vectors_path, ids_path):
    """`count` of `rows` (a `_Rows`) into a memory-mapped `.npy` and their ids (the records
    without the vector) into a JSON-lines file."""
    vectors = np.lib.format.open_memmap(vectors_path, mode="w+", dtype=np.float32, shape=(count, width))
    start = 0
    with open(ids_path, "w", encoding="utf-8") as ids:
        for block, records in rows.take(count):
            vectors[start : start + len(block)] = block
            ids.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
            start += len(block)
    vectors.flush()
    del vectors


def _write_npy(parts, path):
    """One `.npy` of every vector, ids beside it in `OUT.ids.jsonl`."""
    width, count = parts.vector_width(), parts.count()
    ids_path = parts.output.with_name(parts.output.name[: -len(".npy")] + ".ids.jsonl")
    temporary = ids_path.with_name(ids_path.name + ".tmp")
    _write_vectors(_Rows(parts.vector_blocks(width)), count, width, path, temporary)
    os.replace(temporary, ids_path)
    return count


def _write_shards(parts, folder):
    """`vectors-SSSSS-of-NNNNN.npy` and `ids-SSSSS-of-NNNNN.jsonl` of `shard_rows` rows each into `folder`."""
    width, count = parts.vector_width(), parts.count()
    shards = max(-(-count // parts.shard_rows), 1)
    shutil.rmtree(folder, ignore_errors=True)  # a temporary folder a killed run left
    folder.mkdir(parents=True)
    rows = _Rows(parts.vector_blocks(width))
    for shard in range(shards):
        count_here = min(parts.shard_rows, count - shard * parts.shard_rows)
        name = f"{shard:05d}-of-{shards:05d}"
        _write_vectors(rows, count_here, width, folder / f"vectors-{name}.npy", folder / f"ids-{name}.jsonl")
    return count


def _write_parquet(records, output, path, rows_per_group=4096):
    try:
        import pyarrow as pa
        import pyarrow.parquet as parquet
    except ImportError:
        raise ValueError(f"{output}: writing .parquet needs pyarrow (pip install pyarrow)") from None
    columns = _columns(records)
    types = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}
    schema = pa.schema(
        [
            (name, pa.list_(pa.float32()) if name == VECTOR else types.get(type(value), pa.string()))
            for name, value in columns.items()
        ]
    )
    nested = {name for name, value in columns.items() if name != VECTOR and type(value) not in types}

    def value(record, name):
        found = record.get(name)
        return json.dumps(found, ensure_ascii=False) if name in nested and found is not None else found

    count = 0
    with parquet.ParquetWriter(path, schema) as writer:
        group = []
        for record in itertools.chain(records(), [None]):
            if record is not None:
                group.append(record)
                count += 1
            if group and (record is None or len(group) == rows_per_group):
                table = {name: [value(row, name) for row in group] for name in columns}
                if VECTOR in table:
                    table[VECTOR] = _vector_column(pa, table[VECTOR])
                writer.write_table(pa.Table.from_pydict(table, schema=schema))
                group = []
    return count


def _vector_column(pa, vectors):
    """A group's vectors (float32 rows or lists; None for a row in error) as one
    `list<float32>` column, built from a single array rather than a float at a time."""
    lengths = [0 if vector is None else len(vector) for vector in vectors]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    present = [np.asarray(vector, np.float32) for vector in vectors if vector is not None]
    values = np.concatenate(present) if present else np.zeros(0, np.float32)
    missing = pa.array([vector is None for vector in vectors])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values), mask=missing)
