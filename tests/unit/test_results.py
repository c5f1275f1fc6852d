"""commbench.core.results: the parquet schema, atomic incremental writing and careful reading."""

import datetime as dt
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commbench.core.errors import BadInput
from commbench.core.results import COLUMNS, SCHEMA, SCHEMA_VERSION, ResultWriter, read_results, resolve_out

CONTRACT = """run_id label started_at collective dtype size_bytes count in_place world_size nnodes ranks_per_node
backend device iters warmup repetition time_us time_us_min time_us_max time_us_p99 algbw_GBps busbw_GBps wrong
samples_us workload bucket_bytes zero_stage mtu iface link_layer hosts commbench_version torch_version
nccl_version env net schema_version""".split()


def row(**over) -> dict:
    base = {
        "run_id": "20250101-000000-abcdef", "label": "before",
        "started_at": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        "collective": "all_reduce", "dtype": "float32", "op": "sum", "root": -1, "size_bytes": 1024, "count": 256,
        "in_place": True, "world_size": 2, "nnodes": 1, "ranks_per_node": 2, "backend": "gloo", "device": "cpu",
        "device_name": "cpu", "launcher": "local", "iters": 10, "warmup": 5, "repetition": 0, "time_us": 12.5,
        "time_us_min": 10.0, "time_us_max": 20.0, "time_us_p99": 19.5, "algbw_GBps": 1024 / 12.5e-6 / 1e9,
        "busbw_GBps": 1024 / 12.5e-6 / 1e9, "wrong": 0, "samples_us": [10.0, 12.5, 20.0], "workload": "sweep",
        "bucket_bytes": None, "zero_stage": None, "mtu": 65536, "iface": "lo", "link_layer": "loopback",
        "hosts": ["h1"], "commbench_version": "0.1.0", "torch_version": "2.13.0", "nccl_version": None,
        "env": json.dumps({"NCCL_DEBUG": "INFO"}), "net": "{}", "plan": "{}", "schema_version": SCHEMA_VERSION,
    }
    base.update(over)
    return base


def test_schema_holds_every_contract_column():
    missing = [c for c in CONTRACT if c not in COLUMNS]
    assert missing == []
    assert len(set(COLUMNS)) == len(COLUMNS)
    assert SCHEMA.field("samples_us").type == pa.list_(pa.float64())
    assert SCHEMA.field("size_bytes").type == pa.int64()
    assert SCHEMA.field("started_at").type == pa.timestamp("us", tz="UTC")


def test_create_writes_a_valid_empty_file_with_the_full_schema(tmp_path):
    path = tmp_path / "deep" / "er" / "run.parquet"
    ResultWriter(path).create()
    table = pq.read_table(path)
    assert table.num_rows == 0
    assert table.schema.equals(SCHEMA, check_metadata=False)
    frame = read_results([path])
    assert list(frame.columns) == list(COLUMNS) and len(frame) == 0
    assert [p.name for p in path.parent.iterdir()] == ["run.parquet"]  # no temporary files left


@pytest.mark.failure(
    row="every-finished-point-disk-constant",
    section="The result store",
    failure="every finished point is on disk, at a constant cost a point",
    does="the first batch replaces the empty file; every later one is a part of its own "
         "(`NAME.parts/part-NNNNNNNN.parquet`, about 2 ms a point at the 100,000th as at the 1,000th: "
         "benchmarks/append_cost.py); read_results (and compare, plot, report, gate) read the file with its parts; "
         "when the run ends (normally, on an error, Ctrl-C or SIGTERM) the parts are compacted into the file by one "
         "atomic rename and removed; the file records the last part it holds, so parts left by a compaction killed "
         "before its cleanup are never read twice; every 1,000 parts merge into one (a long run leaves few files), "
         "and a single part a merged one holds is not read again",
)
def test_append_keeps_the_file_complete_after_every_call(tmp_path):
    path = tmp_path / "run.parquet"
    writer = ResultWriter(path)
    writer.create()
    writer.append([row(size_bytes=8, count=2, samples_us=[1.0, 2.0])])
    first = read_results([path])
    assert first["size_bytes"].tolist() == [8]
    assert first["samples_us"].iloc[0].tolist() == [1.0, 2.0]
    writer.append([row(size_bytes=16, count=4, in_place=False, wrong=3),
                   row(size_bytes=16, count=4, repetition=1, wrong=None, op=None, mtu=None)])
    frame = read_results([path])
    assert frame["size_bytes"].tolist() == [8, 16, 16]
    assert frame["count"].tolist() == [2, 4, 4]
    assert frame["in_place"].tolist() == [True, False, True]
    assert frame["wrong"].iloc[1] == 3 and pd.isna(frame["wrong"].iloc[2])
    assert pd.isna(frame["op"].iloc[2]) and pd.isna(frame["mtu"].iloc[2])
    assert frame["busbw_GBps"].iloc[0] == pytest.approx(0.08192)
    assert frame["hosts"].iloc[0].tolist() == ["h1"]
    assert json.loads(frame["env"].iloc[0]) == {"NCCL_DEBUG": "INFO"}
    assert frame["started_at"].iloc[0] == pd.Timestamp("2025-01-01", tz="UTC")
    assert (frame["schema_version"] == SCHEMA_VERSION).all()
    # the second batch is a part of its own beside the file until the run ends; then one file holds all
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.parquet", "run.parquet.parts"]
    assert writer.close() is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.parquet"]
    assert pq.read_table(path).num_rows == 3
    assert read_results([path]).equals(frame)


@pytest.mark.failure(row="results-file-already-exists")
def test_create_never_overwrites_an_existing_file(tmp_path):
    path = tmp_path / "old.parquet"
    writer = ResultWriter(path)
    writer.create()
    writer.append([row()])
    before = path.read_bytes()
    with pytest.raises(BadInput, match=r"old\.parquet already exists.*never overwrites"):
        ResultWriter(path).create()
    assert path.read_bytes() == before
    other = tmp_path / "notes.parquet"
    other.write_bytes(b"somebody else's file")
    with pytest.raises(BadInput, match="already exists"):
        ResultWriter(other).create()
    assert other.read_bytes() == b"somebody else's file"


def test_create_refuses_a_file_where_the_folder_should_be(tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("x")
    with pytest.raises(BadInput, match="is a file, not a folder"):
        ResultWriter(blocker / "run.parquet").create()


@pytest.mark.failure(row="result-files-empty-truncated-foreign", name="test_read_rejects_*")
def test_read_rejects_an_empty_file(tmp_path):
    path = tmp_path / "empty.parquet"
    path.write_bytes(b"")
    with pytest.raises(BadInput, match=r"empty\.parquet is not a readable parquet file"):
        read_results([path])


def test_read_rejects_a_csv_renamed_parquet(tmp_path):
    path = tmp_path / "table.parquet"
    pd.DataFrame({"size_bytes": [8], "busbw_GBps": [1.0]}).to_csv(path)
    with pytest.raises(BadInput, match=r"table\.parquet is not a readable parquet file"):
        read_results([path])


def test_read_rejects_a_foreign_parquet(tmp_path):
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"collective": ["all_reduce"], "size_bytes": [8], "busbw_GBps": [1.0]}), path)
    foreign = r"foreign\.parquet is not a commbench results file \(no column schema_version\)"
    with pytest.raises(BadInput, match=foreign):
        read_results([path])


def test_read_rejects_a_newer_schema_version(tmp_path):
    path = tmp_path / "future.parquet"
    pq.write_table(pa.Table.from_pylist([row(schema_version=SCHEMA_VERSION + 1)], schema=SCHEMA), path)
    with pytest.raises(BadInput, match=rf"schema_version {SCHEMA_VERSION + 1}, newer than this commbench reads "
                                       rf"\({SCHEMA_VERSION}\): upgrade commbench"):
        read_results([path])


def test_read_rejects_missing_paths_and_empty_folders(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        read_results([tmp_path / "nope.parquet"])
    with pytest.raises(BadInput, match="no .parquet result files found"):
        read_results([tmp_path])


def test_read_a_folder_and_several_files(tmp_path):
    for name, size in (("b.parquet", 16), ("a.parquet", 8)):
        w = ResultWriter(tmp_path / name)
        w.create()
        w.append([row(size_bytes=size, run_id=name)])
    (tmp_path / "notes.txt").write_text("not a result")
    frame = read_results([tmp_path])
    assert frame["run_id"].tolist() == ["a.parquet", "b.parquet"]
    both = read_results([tmp_path / "b.parquet", tmp_path / "a.parquet"])
    assert both["size_bytes"].tolist() == [16, 8]


def test_resolve_out(tmp_path):
    assert resolve_out("results", "RID") == __import__("pathlib").Path("results/RID.parquet")
    assert resolve_out(str(tmp_path), "RID") == tmp_path / "RID.parquet"
    assert resolve_out(str(tmp_path / "mine.parquet"), "RID") == tmp_path / "mine.parquet"
    assert resolve_out("runs/2025.01", "RID").name == "RID.parquet"


def _many_rows(hosts_a=("n1", "n2"), hosts_b=("n3",)):
    env_a, env_b = json.dumps({"NCCL_ALGO": "Ring"}), json.dumps({"NCCL_ALGO": "Tree"})
    return ([row(size_bytes=8 * (i + 1), hosts=list(hosts_a), env=env_a, net='{"n1": {"mtu": 9000}}') for i in range(4)]
            + [row(size_bytes=64, hosts=list(hosts_b), env=env_b), row(size_bytes=128, hosts=None, env=None),
               row(size_bytes=256, hosts=[], plan=None)])


def test_read_gives_what_pyarrow_gives_with_one_object_per_distinct_json_and_host_list(tmp_path):
    # a million rows repeat one env/net/plan string and one host list a run: read, they are shared, not copied
    path = tmp_path / "run.parquet"
    writer = ResultWriter(path)
    writer.create()
    writer.append(_many_rows())
    plain, frame = pq.read_table(path).to_pandas(), read_results([path])
    assert list(frame.columns) == list(plain.columns)
    for name in ("env", "net", "plan"):
        assert [None if pd.isna(v) else v for v in frame[name]] == [None if pd.isna(v) else v for v in plain[name]]
    assert pd.isna(frame["env"].iloc[5]) and pd.isna(frame["plan"].iloc[6])
    assert frame["env"].iloc[0] is frame["env"].iloc[3]
    assert [None if v is None else v.tolist() for v in frame["hosts"]] == \
        [None if v is None else v.tolist() for v in plain["hosts"]]
    assert frame["hosts"].iloc[0] is frame["hosts"].iloc[3] and frame["hosts"].iloc[4].tolist() == ["n3"]
    assert frame["hosts"].iloc[5] is None and frame["hosts"].iloc[6].tolist() == []
    assert frame["samples_us"].iloc[0].tolist() == plain["samples_us"].iloc[0].tolist()


def test_read_only_some_columns(tmp_path):
    path = tmp_path / "run.parquet"
    writer = ResultWriter(path)
    writer.create()
    writer.append(_many_rows())
    few = read_results([path], columns=["hosts", "time_us", "not_a_column"])
    # the columns every results file holds always come along (they are checked)
    assert sorted(few.columns) == sorted(["collective", "size_bytes", "busbw_GBps", "schema_version", "hosts",
                                          "time_us"])
    most = read_results([path], skip=["samples_us", "env", "collective"])
    assert "samples_us" not in most.columns and "env" not in most.columns and "collective" in most.columns
    assert len(most.columns) == len(COLUMNS) - 2 and most["size_bytes"].tolist() == [8, 16, 24, 32, 64, 128, 256]


def test_close_removes_this_process_s_cut_off_temporaries_and_no_one_else_s(tmp_path):
    """A second signal during a write's own cleanup can leave its temporary: the closing writer
    (no write of its own in flight any more) removes it; another process's stays."""
    import os

    from commbench.core.results import ResultWriter

    path = tmp_path / "r.parquet"
    writer = ResultWriter(path)
    writer.create()
    mine = tmp_path / f".r.parquet.{os.getpid()}.cutoff.tmp"
    theirs = tmp_path / f".r.parquet.{os.getpid() + 1}.cutoff.tmp"
    mine.write_bytes(b"half")
    theirs.write_bytes(b"half")
    assert writer.close() is None
    assert not mine.exists() and theirs.exists()
