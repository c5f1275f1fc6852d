"""nccl-tests -J JSON documents (nccl-tests >= 2.17.3) -> rows: the same halves as the text table,
with more digits and, with -I, each iteration's time; its start time and environment for the
run's columns. nccl-tests writes NaN as "nan" and booleans as "true"/"false" strings."""

from __future__ import annotations

import datetime as dt
import json
import math
import os

from commbench.core.errors import BadInput
from commbench.integrations.nccl_tests.format import (IDENT, INT, INT32_MAX, INT64_MAX, NUMBER, SINGLE_RANK_HINT,
                                                      local_time, nccl_version_string, version_problem, where)
from commbench.integrations.nccl_tests.model import Half, RankInfo, Stream
from commbench.integrations.nccl_tests.records import Parsed, RecordBuilder


def _jnum(value, what: str, source: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadInput(f"{source}: JSON {what} is {value!r}, not a number")
    if isinstance(value, (int, float)):
        v = float(value)
    elif isinstance(value, str) and NUMBER.fullmatch(value.strip()):
        v = float(value.strip())  # nccl-tests writes NaN as "nan"
    else:
        raise BadInput(f"{source}: JSON {what} is {str(value)[:40]!r}, not a number")
    return None if math.isnan(v) else v


def _jint(value, what: str, source: str, lo: int = 0, hi: int = INT64_MAX) -> int:
    if isinstance(value, str) and INT.fullmatch(value.strip()):
        value = int(value.strip())  # root is written as a padded string, e.g. "    -1"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadInput(f"{source}: JSON {what} is {str(value)[:40]!r}, not a whole number in {lo}..{hi}")
    return value


def _jbool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def parse_json_document(text: str, source: str, builder: RecordBuilder) -> Parsed:
    """A -J JSON document -> rows; BadInput naming the first field that is not what nccl-tests writes."""
    doc = _load(text, source)
    s = _stream_of(doc, source)
    parsed = Parsed(fmt="json")
    failed = False
    for i, row in enumerate(doc["results"]):
        for h in _halves(row, i, source):
            if h.wrong:
                failed = True
            rec = builder.record(h, s)
            if rec is not None:
                parsed.records.append(rec)
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict) and (_jbool(oob.get("okay")) is False or (isinstance(oob.get("count"), int)
                                                                       and oob["count"] > 0)):
        failed = True
    parsed.failed = failed
    notes = builder.finish(unit="result")  # the world size of rows whose document did not say it; rows left out
    builder.refusals.raise_any(source, unit="result")
    parsed.skipped = dict(builder.skipped)
    if not parsed.records:
        raise BadInput(f"{where(source, 1)}: the JSON document holds no result rows"
                       + (f" (only rows {', '.join(parsed.skipped)})" if parsed.skipped else ""))
    parsed.warnings.extend(notes)
    if s.several_processes:
        parsed.warnings.append(SINGLE_RANK_HINT)
    if failed:
        parsed.warnings.append("the data check failed (nwrong > 0 or out_of_bounds not okay): these results "
                               "are wrong")
    return parsed


def _load(text: str, source: str) -> dict:
    """The document, if it is one nccl-tests could have written: an object with a 'results' list
    (a file cut short is the usual failure: the run died before nccl-tests closed it)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where(source, exc.lineno)}: not valid JSON ({exc.msg}): a -J file cut short "
                       "(the run died before nccl-tests closed it)?") from None
    except RecursionError:
        raise BadInput(f"{source}: JSON nested too deeply: not an nccl-tests -J file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise BadInput(f"{where(source, 1)}: a JSON document without a 'results' list: not an nccl-tests -J file")
    return doc


def _stream_of(doc: dict, source: str) -> Stream:
    """What the document says about the whole run (versions, program, config, ranks), as the text
    parser's Stream holds it, so both readers build rows the same way."""
    s = Stream()
    code = doc.get("nccl_version")
    bad = version_problem(None, {"nccl_version": code if isinstance(code, (int, str)) else None})
    if bad is not None:
        raise BadInput(f"{source}: JSON {bad}: not a document nccl-tests wrote")
    s.nccl_version = nccl_version_string(code)
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        s.program = os.path.basename(args[0])
    config = doc.get("config")
    cfg: dict = config if isinstance(config, dict) else {}
    for attr, name in (("nthread", "nthreads"), ("ngpus", "ngpus"), ("warmup", "warmup_iters"),
                       ("iters", "iterations"), ("agg_iters", "aggregated_iterations"), ("validation", "validation"),
                       ("graph", "graph")):
        if cfg.get(name) is not None:
            setattr(s, attr, _jint(cfg[name], f"config.{name}", source, 0, INT32_MAX))
    devices = cfg.get("devices") or []
    if not isinstance(devices, list):
        raise BadInput(f"{source}: JSON config.devices is not a list")
    for i, d in enumerate(devices):
        if not isinstance(d, dict):
            raise BadInput(f"{source}: JSON config.devices[{i}] is not an object")
        r = _jint(d.get("rank"), f"config.devices[{i}].rank", source, 0, INT32_MAX)
        if r in s.ranks:
            s.dup_rank = True
        group = d.get("group")
        group = None if group is None else _jint(group, f"config.devices[{i}].group", source, 0, INT32_MAX)
        s.ranks[r] = RankInfo(r, str(d.get("hostname") or "?"), None, None, str(d.get("device_info") or ""), group)
    return s


def _halves(row, i: int, source: str):
    """The placements of results[i], one at a time (a generator, so that each half is checked
    just before it becomes a row, as the text parser does)."""
    at = f"results[{i}]"
    if not isinstance(row, dict):
        raise BadInput(f"{source}: JSON {at} is not an object")
    size = _jint(row.get("size"), f"{at}.size", source)
    count = _jint(row.get("count"), f"{at}.count", source)
    dtype = row.get("type")
    if not isinstance(dtype, str) or not IDENT.fullmatch(dtype.strip()):
        raise BadInput(f"{source}: JSON {at}.type is {str(dtype)[:40]!r}, not a data type name")
    op = row.get("redop")
    if op is not None and (not isinstance(op, str) or not IDENT.fullmatch(op.strip())):
        raise BadInput(f"{source}: JSON {at}.redop is {str(op)[:40]!r}, not a reduction name")
    root = _jint(row["root"], f"{at}.root", source, -1, INT32_MAX) if row.get("root") is not None else None
    iters = row.get("actual_iterations")
    iters = _jint(iters, f"{at}.actual_iterations", source, 0, INT32_MAX) if iters is not None else None
    for in_place, name in ((False, "out_of_place"), (True, "in_place")):
        body = row.get(name)
        if body is None:
            continue
        if not isinstance(body, dict):
            raise BadInput(f"{source}: JSON {at}.{name} is not an object")
        t = _jnum(body.get("time", body.get("cpu_time")), f"{at}.{name}.time", source)
        nwrong = _jnum(body.get("nwrong"), f"{at}.{name}.nwrong", source)
        if nwrong is not None and not 0 <= nwrong <= INT64_MAX // 2:
            raise BadInput(f"{source}: JSON {at}.{name}.nwrong {nwrong} is out of range")
        h = Half(size, count, dtype.strip(), op.strip() if isinstance(op, str) else None, root, in_place, t,
                 _jnum(body.get("alg_bw"), f"{at}.{name}.alg_bw", source),
                 _jnum(body.get("bus_bw"), f"{at}.{name}.bus_bw", source),
                 int(nwrong) if nwrong is not None else None, iters=iters, line=i,
                 cputime="time" not in body and "cpu_time" in body)
        _per_iteration(h, row.get(f"{name}_per_iter"), f"{at}.{name}_per_iter", source)
        yield h


def _per_iteration(h: Half, per, what: str, source: str) -> None:
    """-I's per-iteration times, where the document has them: min, max, p99 and the samples."""
    if isinstance(per, dict):
        h.tmin = _jnum(per.get("min_us"), f"{what}.min_us", source)
        h.tmax = _jnum(per.get("max_us"), f"{what}.max_us", source)
        h.tp99 = _jnum(per.get("p99_us"), f"{what}.p99_us", source)
        times = per.get("times_us")
        if isinstance(times, list):
            vals = [_jnum(v, f"{what}.times_us", source) for v in times]
            h.samples = [v for v in vals if v is not None] or None


def json_started_at(text: str) -> dt.datetime | None:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return local_time(doc.get("start_time")) if isinstance(doc, dict) else None


def json_env(text: str) -> dict[str, str]:
    from commbench.net.envinfo import env_snapshot

    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    env = doc.get("env") if isinstance(doc, dict) else None
    pairs = {}
    for item in env if isinstance(env, list) else []:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            pairs[k] = v
    return env_snapshot(pairs)
